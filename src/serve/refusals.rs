//! What a read-only broker answers to the APIs that would write, coordinate or administer.
//!
//! Kafka has no "read-only" error code. The nearest precedent is a broker whose ACLs deny
//! the client the operation: it answers the matching `*_AUTHORIZATION_FAILED` code, which
//! every client treats as non-retriable and reports at once. Retriable codes
//! (COORDINATOR_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, …) would be wrong here: retrying can
//! never help, and clients would spin silently until their own timeouts. Where the version
//! has an error-message field it says [`READ_ONLY`] and what to do instead.
//!
//! | API | answer | why |
//! |---|---|---|
//! | Produce | TOPIC_AUTHORIZATION_FAILED per partition; none for acks=0 | what a principal without Write gets |
//! | InitProducerId | TRANSACTIONAL_ID_AUTHORIZATION_FAILED (with an id), else CLUSTER_AUTHORIZATION_FAILED | Kafka's answer without Write on the id / IdempotentWrite on the cluster |
//! | FindCoordinator | for groups: this node, which refuses every group request below; for transactions (key type 1): TRANSACTIONAL_ID_AUTHORIZATION_FAILED | librdkafka looks up the coordinator whenever `group.id` is set, even for a consumer that only `assign()`s and never commits: an error here would reach such a consumer, which needs no group; COORDINATOR_NOT_AVAILABLE would make a subscribing consumer retry forever |
//! | JoinGroup, Heartbeat, LeaveGroup, SyncGroup, ListGroups | GROUP_AUTHORIZATION_FAILED | no groups are coordinated here |
//! | OffsetCommit, OffsetFetch, DescribeGroups | GROUP_AUTHORIZATION_FAILED per partition / group, as each version's schema places it | as above |
//! | CreateTopics, DeleteTopics, DeleteRecords, CreatePartitions | TOPIC_AUTHORIZATION_FAILED per topic | topics are the source cluster's to change |
//! | AlterConfigs, IncrementalAlterConfigs | per resource: TOPIC_ / GROUP_ / CLUSTER_AUTHORIZATION_FAILED | as above |
//! | DescribeConfigs | the same per resource | the replica does not hold the source's configs; an empty list without error would claim every value is the default |
//! | DescribeCluster | this node as the only broker and controller | true of the replica, and admin clients ask it first |
//!
//! ListGroups: Kafka answers a principal allowed to describe no group with an empty list and
//! no error; the error is given instead so that a tool listing groups here learns why.
//!
//! # Advertised in ApiVersions
//! Every API here is advertised with the versions it is answered at
//! ([`RefusedApi::supported`]). librdkafka 2.16 does not send an API the broker does not
//! list (measured with the listing taken out): unlisted, a Producer's message
//! waits out `message.timeout.ms` and fails "Local: Message timed out", and a group Consumer
//! reports nothing at all; listed, the Producer gets "Broker: Topic authorization failed"
//! and the Consumer GROUP_AUTHORIZATION_FAILED within a second.

use crate::protocol::RefusedApi;
use crate::protocol::admin::{self, ConfigApi, ConfigResource};
use crate::protocol::codec::{DecodeResult, Writer};
use crate::protocol::error::ErrorCode;
use crate::protocol::{group, produce};

/// The error message of every refusal that has room for one.
pub const READ_ONLY: &str = "this broker is a read-only replica";

/// The versions of each API here, as ApiVersions advertises them.
pub fn advertised() -> impl Iterator<Item = (RefusedApi, i16, i16)> {
    RefusedApi::ALL.into_iter().map(|api| {
        let (min, max) = api.supported();
        (api, min, max)
    })
}

fn admin_message() -> String {
    format!("{READ_ONLY}: administer the source cluster instead")
}

/// Kafka's error for an operation on a config resource the client may not touch.
fn config_resource_error(res: &ConfigResource) -> ErrorCode {
    match res.resource_type {
        admin::RESOURCE_TOPIC => ErrorCode::TOPIC_AUTHORIZATION_FAILED,
        admin::RESOURCE_GROUP => ErrorCode::GROUP_AUTHORIZATION_FAILED,
        _ => ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
    }
}

/// The body answering `api` at `version`, a version it is
/// advertised at; `None` when Kafka sends no response (Produce with acks=0). A request that
/// cannot be decoded is an error, which closes the connection as Kafka does. `this` is this
/// broker as FindCoordinator and DescribeCluster name it; `cluster_id` is asked only by
/// DescribeCluster.
pub fn answer(
    this: group::Coordinator<'_>,
    cluster_id: impl FnOnce() -> Option<String>,
    api: RefusedApi,
    version: i16,
    body: &[u8],
) -> DecodeResult<Option<Vec<u8>>> {
    let mut w = Writer::new();
    let group_error = ErrorCode::GROUP_AUTHORIZATION_FAILED;
    match api {
        RefusedApi::Produce => {
            let req = produce::decode_produce_request(body, version)?;
            if req.acks == 0 {
                return Ok(None);
            }
            let e = ErrorCode::TOPIC_AUTHORIZATION_FAILED;
            produce::encode_produce_error(&mut w, version, &req.topics, e, READ_ONLY);
        }
        RefusedApi::InitProducerId => {
            let e = match produce::decode_init_producer_id_request(body, version)? {
                Some(_) => ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                None => ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
            };
            produce::encode_init_producer_id_error(&mut w, version, e);
        }
        RefusedApi::FindCoordinator => {
            let req = group::decode_find_coordinator_request(body, version)?;
            if req.key_type == group::KEY_TYPE_TRANSACTION {
                let message = format!("{READ_ONLY}: it coordinates no transactions");
                let e = ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
                group::encode_find_coordinator_error(&mut w, version, &req.keys, e, &message);
            } else {
                // This node, which then refuses every group request: a consumer that only
                // assign()s (librdkafka asks for a coordinator whenever group.id is set)
                // never meets an error, one that subscribes or commits does, at once.
                group::encode_find_coordinator(
                    &mut w,
                    version,
                    &req.keys,
                    ErrorCode::NONE,
                    None,
                    this,
                );
            }
        }
        RefusedApi::JoinGroup => group::encode_join_group_error(&mut w, version, group_error),
        RefusedApi::Heartbeat => group::encode_heartbeat_error(&mut w, version, group_error),
        RefusedApi::LeaveGroup => group::encode_leave_group_error(&mut w, version, group_error),
        RefusedApi::SyncGroup => group::encode_sync_group_error(&mut w, version, group_error),
        RefusedApi::ListGroups => group::encode_list_groups_error(&mut w, version, group_error),
        RefusedApi::OffsetCommit => {
            let topics = group::decode_offset_commit_request(body, version)?;
            group::encode_offset_commit_error(&mut w, version, &topics, group_error);
        }
        RefusedApi::OffsetFetch => {
            let req = group::decode_offset_fetch_request(body, version)?;
            group::encode_offset_fetch_error(&mut w, version, &req, group_error);
        }
        RefusedApi::DescribeGroups => {
            let groups = group::decode_describe_groups_request(body, version)?;
            group::encode_describe_groups_error(&mut w, version, &groups, group_error);
        }
        RefusedApi::CreateTopics => {
            let names = admin::decode_create_topics_request(body, version)?;
            let e = ErrorCode::TOPIC_AUTHORIZATION_FAILED;
            admin::encode_create_topics_error(&mut w, version, &names, e, &admin_message());
        }
        RefusedApi::DeleteTopics => {
            let topics = admin::decode_delete_topics_request(body, version)?;
            let e = ErrorCode::TOPIC_AUTHORIZATION_FAILED;
            admin::encode_delete_topics_error(&mut w, version, &topics, e, &admin_message());
        }
        RefusedApi::DeleteRecords => {
            let topics = admin::decode_delete_records_request(body, version)?;
            let e = ErrorCode::TOPIC_AUTHORIZATION_FAILED;
            admin::encode_delete_records_error(&mut w, version, &topics, e);
        }
        RefusedApi::CreatePartitions => {
            let names = admin::decode_create_partitions_request(body, version)?;
            let e = ErrorCode::TOPIC_AUTHORIZATION_FAILED;
            admin::encode_create_partitions_error(&mut w, version, &names, e, &admin_message());
        }
        RefusedApi::AlterConfigs
        | RefusedApi::IncrementalAlterConfigs
        | RefusedApi::DescribeConfigs => {
            let config_api = match api {
                RefusedApi::AlterConfigs => ConfigApi::Alter,
                RefusedApi::IncrementalAlterConfigs => ConfigApi::IncrementalAlter,
                _ => ConfigApi::Describe,
            };
            let message = if config_api == ConfigApi::Describe {
                format!("{READ_ONLY}: it holds no configs; describe them on the source cluster")
            } else {
                admin_message()
            };
            let res = admin::decode_config_resources(body, version, config_api)?;
            let f = config_resource_error;
            admin::encode_config_errors(&mut w, version, config_api, &res, f, &message);
        }
        RefusedApi::DescribeCluster => {
            let endpoint_type = admin::decode_describe_cluster_request(body, version)?;
            let cluster_id = cluster_id().unwrap_or_default();
            let node = admin::ClusterNode {
                node_id: this.node_id,
                host: this.host,
                port: this.port,
                cluster_id: &cluster_id,
            };
            admin::encode_describe_cluster(&mut w, version, endpoint_type, &node);
        }
    }
    Ok(Some(w.buf))
}
