//! Objects in the bucket as the rest of the offsite code sees them: sealed on the way up,
//! opened (and so checked) on the way down, named relative to the configured prefix.

use super::envelope;
use super::manifest::{FileSum, Manifest, PartitionKey};
use super::settings::Offsite;
use super::store::{Put, StoreError};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;

/// Creates object `name` holding `plain` (sealed), unless it exists. One that exists (put
/// before a kill, or by a PUT whose answer was lost) is read back and must hold `plain`: a
/// store may keep the bytes of a PUT it refused, and nothing may take those for a copy.
pub fn put(o: &Offsite, name: &str, plain: &[u8]) -> Result<Put> {
    let sealed = envelope::seal(o.key.as_ref(), name, plain)
        .with_context(|| format!("cannot seal object `{name}`"))?;
    let put = o.store.put_new(&o.object(name), &sealed)?;
    if put == Put::Existed {
        let found = get_sized(o, name, plain.len() as u64)?;
        if found.as_deref() != Some(plain) {
            bail!(
                "object `{}` in {} exists with other bytes than those to upload; objects are never overwritten: move it aside in the bucket (the daemon uploads it again)",
                o.object(name),
                o.location
            );
        }
    }
    Ok(put)
}

/// Writes manifest `m` as its generation. `Some` of the manifest found under that name
/// when it holds other bytes: the same writer's earlier PUT whose answer was lost (it differs
/// only in what it was written from), or another writer's.
pub fn put_manifest(o: &Offsite, m: &Manifest) -> Result<Option<Manifest>> {
    let name = m.key.manifest(m.generation);
    let plain = m.render();
    let sealed = envelope::seal(o.key.as_ref(), &name, plain.as_bytes())
        .with_context(|| format!("cannot seal object `{name}`"))?;
    match o.store.put_new(&o.object(&name), &sealed)? {
        Put::Created => Ok(None),
        Put::Existed => {
            let found = read_manifest(o, &m.key, m.generation)?;
            Ok((found.render() != plain).then_some(found))
        }
    }
}

/// The plaintext of object `name`; `None` when there is no such object.
pub fn get(o: &Offsite, name: &str) -> Result<Option<Vec<u8>>> {
    get_sealed(o, name, o.store.get(&o.object(name))?)
}

/// [`get`] of an object whose plaintext is `size` bytes (a piece, an index, a part): a
/// larger object is refused before it is read, and one piece may hold a batch larger than
/// any fixed limit.
pub fn get_sized(o: &Offsite, name: &str, size: u64) -> Result<Option<Vec<u8>>> {
    let max = envelope::sealed_len_at_most(size);
    get_sealed(o, name, o.store.get_at_most(&o.object(name), max)?)
}

fn get_sealed(o: &Offsite, name: &str, sealed: Option<Vec<u8>>) -> Result<Option<Vec<u8>>> {
    let Some(sealed) = sealed else {
        return Ok(None);
    };
    match envelope::open(o.key.as_ref(), name, &sealed) {
        Ok(p) => Ok(Some(p)),
        Err(e) => Err(open_error(o, name, e)),
    }
}

/// Why object `name` could not be opened, with what to do about it.
fn open_error(o: &Offsite, name: &str, e: envelope::OpenError) -> anyhow::Error {
    use envelope::OpenError as E;
    match e {
        E::NeedsKey { .. } => anyhow::anyhow!(
            "object `{}` in {} is encrypted and no key is configured: set offsite.encryption_key_file to the key it was written with",
            o.object(name),
            o.location
        ),
        E::WrongKey { .. } => anyhow::anyhow!(
            "object `{}` in {} was encrypted with another key than offsite.encryption_key_file: {e}",
            o.object(name),
            o.location
        ),
        E::Unencrypted => anyhow::anyhow!(
            "object `{}` in {} is not encrypted, but offsite.encryption_key_file is set: this prefix was written without a key (one prefix keeps one key, or none, for its whole life)",
            o.object(name),
            o.location
        ),
        other => anyhow::anyhow!(
            "object `{}` in {} is damaged: {other}",
            o.object(name),
            o.location
        ),
    }
}

/// The store's first answer, for a command: a refusal says what to check (the bucket, the
/// credentials, the clock) before the store's own words.
pub fn check(o: &Offsite) -> Result<()> {
    o.store.check().map_err(|e| {
        let advice = e.advice();
        anyhow::Error::new(e).context(advice)
    })
}

/// Whether `e` is a store failure worth retrying (unreachable, timeout, 5xx, SlowDown).
pub fn is_transient(e: &anyhow::Error) -> bool {
    e.chain()
        .find_map(|c| c.downcast_ref::<StoreError>())
        .is_some_and(StoreError::is_transient)
}

/// Whether `e` is the store failing for every object alike (unreachable, slow, failing, no
/// such bucket, refused credentials or clock), so that a round ends there; a refusal of one
/// object (access denied to one name, an answer too large) is that partition's.
pub fn fails_every_object(e: &anyhow::Error) -> bool {
    use super::store::Kind;
    store_error(e).is_some_and(|se| {
        matches!(
            se.kind,
            Kind::Unreachable
                | Kind::Timeout
                | Kind::Server
                | Kind::SlowDown
                | Kind::NoSuchBucket
                | Kind::BadCredentials
                | Kind::ClockSkew
        )
    })
}

/// The store error inside `e`, if any.
pub fn store_error(e: &anyhow::Error) -> Option<&StoreError> {
    e.chain().find_map(|c| c.downcast_ref::<StoreError>())
}

/// The newest manifest generation of `key` (0: none), found by probing names: generations
/// are written one after the other from 1, so doubling then halving finds the last in about
/// 2·log2(n) requests, without listing.
pub fn latest_generation(o: &Offsite, key: &PartitionKey) -> Result<u64> {
    latest_of(o, &|g| key.manifest(g), &key.describe())
}

/// [`latest_generation`] of the manifests named `name(generation)`.
fn latest_of(o: &Offsite, name: &dyn Fn(u64) -> String, what: &str) -> Result<u64> {
    let exists = |g: u64| -> Result<bool> { Ok(o.store.exists(&o.object(&name(g)))?) };
    if !exists(1)? {
        return Ok(0);
    }
    let mut low = 1u64; // exists
    let mut high = 2u64;
    while exists(high)? {
        low = high;
        high = high.saturating_mul(2);
        if high == u64::MAX {
            bail!("{what}: manifest generations run past {low}");
        }
    }
    // low exists, high does not.
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if exists(mid)? {
            low = mid;
        } else {
            high = mid;
        }
    }
    Ok(low)
}

/// The data dir's own files a restore needs besides the partitions (`topic-configs-checkpoint`,
/// `group-offsets-checkpoint`), as one cluster's manifest of them lists them: name → sum.
pub type ClusterFiles = BTreeMap<String, FileSum>;

/// `<cluster>/~cluster/`: beside the topics (`~` is in no topic name).
pub fn cluster_root(cluster: &str) -> String {
    format!("{cluster}/~cluster/")
}

pub fn cluster_file(cluster: &str, name: &str, sum: &FileSum) -> String {
    format!(
        "{}files/{name}.{}-{:08x}",
        cluster_root(cluster),
        sum.size,
        sum.crc
    )
}

fn cluster_manifest_name(cluster: &str, generation: u64) -> String {
    format!("{}manifest/{generation:020}", cluster_root(cluster))
}

const CLUSTER_MAGIC: &str = "replica-follower offsite cluster files 1";

/// The newest generation of `cluster`'s manifest of files and what it lists (0 and none:
/// no manifest yet).
pub fn latest_cluster_files(o: &Offsite, cluster: &str) -> Result<(u64, ClusterFiles)> {
    let g = latest_of(o, &|g| cluster_manifest_name(cluster, g), cluster)?;
    if g == 0 {
        return Ok((0, ClusterFiles::new()));
    }
    let name = cluster_manifest_name(cluster, g);
    let text = manifest_text(o, &name)?;
    let malformed = || anyhow::anyhow!("manifest `{}` is malformed", o.object(&name));
    let body = super::manifest::without_end_line(&text)
        .with_context(|| format!("manifest `{}` is malformed", o.object(&name)))?;
    let mut lines = body.lines();
    if lines.next() != Some(CLUSTER_MAGIC) {
        return Err(malformed());
    }
    let mut files = ClusterFiles::new();
    for line in lines {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if let ["file", name, size, crc] = parts.as_slice() {
            let sum = FileSum {
                size: size.parse().map_err(|_| malformed())?,
                crc: u32::from_str_radix(crc, 16).map_err(|_| malformed())?,
            };
            if ![
                crate::log::data_dir::DataDir::TOPIC_CONFIGS,
                crate::log::data_dir::DataDir::GROUP_OFFSETS,
            ]
            .contains(name)
            {
                return Err(malformed());
            }
            files.insert((*name).to_string(), sum);
        }
    }
    Ok((g, files))
}

/// Writes `files` as generation `generation` of `cluster`'s manifest of files.
pub fn put_cluster_files(
    o: &Offsite,
    cluster: &str,
    generation: u64,
    files: &ClusterFiles,
) -> Result<()> {
    let mut text = format!("{CLUSTER_MAGIC}\n");
    for (name, sum) in files {
        text.push_str(&format!("file {name} {} {:08x}\n", sum.size, sum.crc));
    }
    let text = super::manifest::with_end_line(text);
    put(
        o,
        &cluster_manifest_name(cluster, generation),
        text.as_bytes(),
    )
    .map(drop)
}

/// The newest manifest of `key`, if it has one; checked to be of that partition.
pub fn latest_manifest(o: &Offsite, key: &PartitionKey) -> Result<Option<Manifest>> {
    let generation = latest_generation(o, key)?;
    if generation == 0 {
        return Ok(None);
    }
    read_manifest(o, key, generation).map(Some)
}

/// The text of manifest object `name`, which must be there.
fn manifest_text(o: &Offsite, name: &str) -> Result<String> {
    let bytes = get(o, name)?
        .with_context(|| format!("manifest `{}` vanished from {}", o.object(name), o.location))?;
    String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("manifest `{}` is not text", o.object(name)))
}

pub fn read_manifest(o: &Offsite, key: &PartitionKey, generation: u64) -> Result<Manifest> {
    let name = key.manifest(generation);
    let text = manifest_text(o, &name)?;
    let m = Manifest::parse(&text, &o.object(&name))?;
    if m.key != *key || m.generation != generation {
        bail!(
            "manifest `{}` describes {} generation {}, not {} generation {generation}",
            o.object(&name),
            m.key.describe(),
            m.generation,
            key.describe()
        );
    }
    Ok(m)
}

/// The common prefixes one level under `under` (relative names, each ending in `/`).
fn children(o: &Offsite, under: &str) -> Result<Vec<String>> {
    let listing = o.store.list(&o.object(under), Some("/"))?;
    Ok(listing
        .prefixes
        .into_iter()
        .filter_map(|p| p.strip_prefix(&o.prefix).map(str::to_string))
        .collect())
}

/// Every partition history the bucket holds (of `cluster`, or of every cluster), found by
/// listing one level at a time: cluster, topic, topic id, partition.
pub fn partitions(o: &Offsite, cluster: Option<&str>) -> Result<Vec<PartitionKey>> {
    let clusters = match cluster {
        Some(c) => vec![format!("{c}/")],
        None => children(o, "")?,
    };
    let mut out = Vec::new();
    for c in clusters {
        for t in children(o, &c)?.into_iter().filter(|t| !t.contains("/~")) {
            for id in children(o, &t)? {
                for p in children(o, &id)? {
                    let parts: Vec<&str> = p.trim_end_matches('/').split('/').collect();
                    if let [cluster_id, topic, topic_id, partition] = parts.as_slice()
                        && let Ok(partition) = partition.parse::<i32>()
                    {
                        let topic_id = match *topic_id {
                            "-" => None,
                            t => match crate::protocol::uuid::Uuid::parse(t) {
                                Some(u) => Some(u),
                                None => continue,
                            },
                        };
                        out.push(PartitionKey {
                            cluster_id: (*cluster_id).to_string(),
                            topic: (*topic).to_string(),
                            topic_id,
                            partition,
                        });
                    }
                }
            }
        }
    }
    out.sort();
    Ok(out)
}
