//! The passes over every log: flush, checkpoint (see the order in [`super`]), retention, and
//! the final checkpoint at shutdown. Each visits only the logs that changed since it last
//! did, and shares the fsyncs of many logs among a few threads.

use super::{LogManager, SharedLog, lock_log};
use crate::checkpoint::{self, TopicPartition};
use crate::clock::now_ms;
use crate::log::data_dir::DataDir;
use crate::log::partition::{FlushTicket, LogSummary, StagedEpochs};
use crate::log::touched::Pass;
use anyhow::Result;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

impl LogManager {
    /// Flushes one log: pending index entries and descriptors are taken under its lock, the
    /// fsyncs run outside it (the fetcher keeps appending meanwhile), then the recovery point
    /// moves to what was synced. A log whose flush fails counts as changed, so it is tried
    /// again.
    fn flush_one(log: &SharedLog) -> Result<()> {
        let ticket = {
            let mut l = lock_log(log);
            l.untouch(Pass::Flush);
            if l.retired || l.failed.is_some() {
                return Ok(());
            }
            match l.begin_flush() {
                Ok(t) => t,
                Err(e) => {
                    l.touch(&[Pass::Flush]);
                    return Err(e);
                }
            }
        };
        if let Some(t) = ticket {
            if let Err(e) = t.sync() {
                lock_log(log).touch(&[Pass::Flush]);
                return Err(e);
            }
            lock_log(log).finish_flush(t);
        }
        Ok(())
    }

    /// Flushes every log that changed since it was last flushed (the recovery point moves to
    /// each log end). Errors are per partition: the first is returned after every log was
    /// tried.
    pub fn flush_all(&self) -> Result<()> {
        let due: Vec<(TopicPartition, SharedLog)> = self
            .touched
            .take(Pass::Flush)
            .into_iter()
            .filter_map(|tp| self.get(&tp).map(|log| (tp, log))) // else archived meanwhile
            .collect();
        self.set_visits(Pass::Flush, due.len());
        let mut first_err = None;
        if self.fs_sync.fits(due.len()) {
            let mut begun = Vec::with_capacity(due.len());
            for_each_log_io(
                due,
                |(tp, log)| self.begin_one_by_syncfs(tp, log),
                |r| match r {
                    Ok(Some(b)) => begun.push(b),
                    Ok(None) => {}
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                },
            );
            if !begun.is_empty() {
                self.fs_sync.sync();
            }
            for (log, ticket) in begun {
                lock_log(&log).finish_flush(ticket);
            }
            return first_err.map_or(Ok(()), Err);
        }
        for_each_log_io(
            due,
            |(tp, log)| {
                Self::flush_one(&log).inspect_err(|e| self.storage_error(&tp, "flush failed", e))
            },
            |r| {
                if let Err(e) = r {
                    first_err.get_or_insert(e);
                }
            },
        );
        first_err.map_or(Ok(()), Err)
    }

    /// [`Self::flush_one`]'s first half for a flush pass that syncs the file system once.
    fn begin_one_by_syncfs(
        &self,
        tp: TopicPartition,
        log: SharedLog,
    ) -> Result<Option<(SharedLog, FlushTicket)>> {
        let mut l = lock_log(&log);
        l.untouch(Pass::Flush);
        if l.retired || l.failed.is_some() {
            return Ok(None);
        }
        match l.begin_flush_by_syncfs() {
            Ok(t) => {
                drop(l);
                Ok(t.map(|t| (log, t)))
            }
            Err(e) => {
                l.touch(&[Pass::Flush]);
                drop(l);
                self.storage_error(&tp, "flush failed", &e);
                Err(e)
            }
        }
    }

    /// A checkpoint's first half on one log in a pass that syncs the file system once:
    /// pending index entries written, a flush begun, its new epoch checkpoint written to a
    /// temporary file. A log with nothing to sync, failed or archived is done at once.
    fn stage_one(&self, tp: TopicPartition, shared: SharedLog) -> Stage {
        let mut log = lock_log(&shared);
        log.untouch(Pass::Flush);
        log.untouch(Pass::Checkpoint);
        if log.retired {
            return Stage::Done((tp, None));
        }
        if log.failed.is_some() {
            let s = log.summary();
            return Stage::Done((tp, Some((s, true))));
        }
        let staged = log
            .begin_flush_by_syncfs()
            .map_err(|e| ("flush failed", e))
            .and_then(|ticket| {
                log.stage_epochs()
                    .map(|epochs| (ticket, epochs))
                    .map_err(|e| ("writing its leader-epoch checkpoint failed", e))
            });
        drop(log);
        match staged {
            Ok((ticket, epochs)) => Stage::Staged(Staged {
                tp,
                shared,
                ticket,
                epochs,
            }),
            Err((what, e)) => Stage::Done(self.after_error(tp, &shared, what, &e)),
        }
    }

    /// A checkpoint's second half on one log, after the file system was synced: the
    /// recovery point moves, the epoch checkpoint is renamed into place and the producer
    /// snapshot written (both durable at the pass's second sync).
    fn commit_one(&self, staged: Staged, final_snapshots: bool) -> (LogFigures, bool) {
        let Staged {
            tp,
            shared,
            ticket,
            epochs,
        } = staged;
        let mut log = lock_log(&shared);
        if log.retired {
            // Its directory is archived, the staged file with it: the path may be a new
            // log's now, so nothing is removed.
            return ((tp, None), false);
        }
        if let Some(t) = ticket {
            log.finish_flush(t);
        }
        let snapshot = log.last_snapshot;
        let committed = epochs
            .map_or(Ok(false), |e| log.commit_epochs(e))
            .map_err(|e| ("writing its leader-epoch checkpoint failed", e))
            .and_then(|renamed| {
                log.snapshot_producer_state(final_snapshots)
                    .map(|()| renamed)
                    .map_err(|e| ("writing its producer snapshot failed", e))
            });
        let wrote = log.last_snapshot != snapshot || committed.as_ref().is_ok_and(|r| *r);
        if let Err((what, e)) = committed {
            drop(log);
            return (self.after_error(tp, &shared, what, &e), wrote);
        }
        let failed = log.failed.is_some();
        let s = log.summary();
        ((tp, Some((s, failed))), wrote)
    }

    /// A log whose checkpoint work failed: the error is reported, the log tried again at the
    /// next checkpoint (a full disk fails no partition), its figures kept.
    fn after_error(
        &self,
        tp: TopicPartition,
        shared: &SharedLog,
        what: &str,
        e: &anyhow::Error,
    ) -> LogFigures {
        self.storage_error(&tp, what, e);
        let mut log = lock_log(shared);
        log.touch(&[Pass::Flush, Pass::Checkpoint]);
        let failed = log.failed.is_some();
        let s = log.summary();
        (tp, Some((s, failed)))
    }

    /// The checkpoint work on many logs with two file-system syncs at most (see
    /// [`super::fs_sync`]): every log staged, one sync for their data and new files, every
    /// log committed, one sync for the renames and snapshots. A sync with nothing to cover
    /// is skipped (a pass after high watermarks alone moved makes none). `done` gets each
    /// log's figures once they are durable.
    fn checkpoint_by_syncfs(
        &self,
        logs: Vec<(TopicPartition, SharedLog)>,
        final_snapshots: bool,
        done: &mut dyn FnMut(LogFigures),
    ) {
        let mut staged = Vec::with_capacity(logs.len());
        for_each_log_io(
            logs,
            |(tp, shared)| self.stage_one(tp, shared),
            |r| {
                (self.heartbeat.0)();
                match r {
                    Stage::Staged(s) => staged.push(s),
                    Stage::Done(figures) => done(figures),
                }
            },
        );
        if staged
            .iter()
            .any(|s| s.ticket.is_some() || s.epochs.is_some())
        {
            self.fs_sync.sync();
        }
        (self.heartbeat.0)();
        let mut committed = Vec::with_capacity(staged.len());
        let mut wrote = false;
        for_each_log_io(
            staged,
            |s| self.commit_one(s, final_snapshots),
            |(r, w)| {
                (self.heartbeat.0)();
                wrote |= w;
                committed.push(r);
            },
        );
        if wrote {
            self.fs_sync.sync();
        }
        committed.into_iter().for_each(done);
    }

    /// A checkpoint's work on one log: flush it, write its leader-epoch checkpoint and (when
    /// due) its producer snapshot. Returns its figures and whether it is failed, or `None`
    /// when it was archived meanwhile.
    fn checkpoint_one(
        &self,
        tp: TopicPartition,
        shared: &SharedLog,
        final_snapshots: bool,
    ) -> LogFigures {
        let flushed = Self::flush_one(shared);
        let mut log = lock_log(shared);
        log.untouch(Pass::Checkpoint);
        if log.retired {
            // Archived meanwhile: its directory and figures are no longer the log's.
            return (tp, None);
        }
        // A failed partition keeps the figures it had: they name only what was synced.
        let flushed = if log.failed.is_some() {
            Ok(())
        } else {
            flushed
                .map_err(|e| ("flush failed", e))
                .and_then(|_| {
                    log.checkpoint_epochs()
                        .map_err(|e| ("writing its leader-epoch checkpoint failed", e))
                })
                .and_then(|_| {
                    log.snapshot_producer_state(final_snapshots)
                        .map_err(|e| ("writing its producer snapshot failed", e))
                })
        };
        if let Err((what, e)) = flushed {
            drop(log);
            return self.after_error(tp, shared, what, &e);
        }
        let failed = log.failed.is_some();
        let s = log.summary();
        (tp, Some((s, failed)))
    }

    /// Flushes every log that changed since the last checkpoint, then rewrites the three
    /// checkpoint files atomically (those whose content changed). After a change to the set
    /// of logs, every log is visited.
    pub fn checkpoint(&self) -> Result<()> {
        self.checkpoint_with(false).map(|_| ())
    }

    /// [`Self::checkpoint`]; `final_snapshots` visits every log and also writes a producer
    /// snapshot at every log end that lacks one, so the next start walks nothing to rebuild
    /// open transactions. Returns the partitions that are failed (their figures are the last
    /// synced ones).
    pub(super) fn checkpoint_with(&self, final_snapshots: bool) -> Result<Vec<TopicPartition>> {
        let mut state = self
            .checkpoint_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // What a flush pass has yet to flush is flushed here too.
        let mut due = self.touched.take(Pass::Checkpoint);
        due.append(&mut self.touched.take(Pass::Flush));
        // The structure is read with the list of logs: a log put in the map after it makes the
        // next checkpoint visit every log again.
        let (structure, every) = {
            let logs = self
                .logs
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let structure = self.structure.load(Ordering::SeqCst);
            let every = (final_snapshots || state.structure != Some(structure)).then(|| {
                logs.iter()
                    .map(|(tp, l)| (tp.clone(), Some(l.clone())))
                    .collect::<Vec<_>>()
            });
            (structure, every)
        };
        let visit = match every {
            Some(every) => {
                state.clear();
                every
            }
            None => due
                .into_iter()
                .map(|tp| {
                    let log = self.get(&tp);
                    (tp, log)
                })
                .collect(),
        };
        let mut present = Vec::with_capacity(visit.len());
        for (tp, log) in visit {
            match log {
                Some(log) => present.push((tp, log)),
                None => state.forget(&tp), // archived meanwhile
            }
        }
        let visited = present.len();
        let mut record = |(tp, figures): LogFigures| {
            // Many logs, each fsynced: progress for the watchdog as they come.
            (self.heartbeat.0)();
            match figures {
                Some((s, failed)) => state.set(&tp, &s, failed),
                None => state.forget(&tp),
            }
        };
        if self.fs_sync.fits(visited) {
            self.checkpoint_by_syncfs(present, final_snapshots, &mut record);
        } else {
            for_each_log_io(
                present,
                |(tp, shared)| self.checkpoint_one(tp, &shared, final_snapshots),
                &mut record,
            );
        }
        self.set_visits(Pass::Checkpoint, visited);
        state.structure = Some(structure);
        if state.changed {
            let files = [
                (
                    DataDir::REPLICATION_OFFSET,
                    checkpoint::render_offsets(&state.high_watermarks),
                ),
                (
                    DataDir::RECOVERY_POINT,
                    checkpoint::render_offsets(&state.recovery_points),
                ),
                (
                    DataDir::LOG_START_OFFSET,
                    checkpoint::render_offsets(&state.log_starts),
                ),
            ];
            for (name, content) in files {
                if state.written.get(name) != Some(&content) {
                    checkpoint::rewrite_atomic(&self.data_dir.join(name), &content)?;
                    state.written.insert(name, content);
                }
            }
            state.changed = false;
        }
        Ok(state.failed.iter().cloned().collect())
    }

    /// Applies retention to the logs that may lose a segment: none while retention is off,
    /// else those that changed since the last pass and those that had two segments or more
    /// then (a log's active segment is never deleted).
    pub fn apply_retention(&self) {
        self.apply_retention_at(now_ms());
    }

    /// [`Self::apply_retention`] as at `now` (ms since the epoch).
    pub(super) fn apply_retention_at(&self, now: i64) {
        if self.config.retention_bytes < 0 && self.config.retention_ms < 0 {
            self.set_visits(Pass::Retention, 0);
            return;
        }
        let mut candidates = self
            .retention_candidates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut due = self.touched.take(Pass::Retention);
        due.append(&mut candidates);
        let mut visited = 0;
        for tp in due {
            let Some(log) = self.get(&tp) else {
                continue; // archived meanwhile
            };
            visited += 1;
            let mut log = lock_log(&log);
            log.untouch(Pass::Retention);
            if log.retired {
                continue; // archived meanwhile: its paths now belong to the new log
            }
            let floor = self.hold.as_ref().map_or(i64::MAX, |h| h.floor(&log));
            if log.failed.is_none()
                && let Err(e) = log.apply_retention_below(now, floor)
            {
                crate::log_error!("{tp}: retention failed: {e:#}");
            }
            // Only time cuts an unchanged log: by size, a log can pass the limit only by an
            // append, which marks it.
            // A held log is looked at again until the copy holds what retention would cut.
            if (self.config.retention_ms >= 0 || self.hold.is_some())
                && log.segments().nth(1).is_some()
            {
                candidates.insert(tp);
            }
        }
        self.set_visits(Pass::Retention, visited);
    }

    /// Final checkpoint and the clean-shutdown marker. After this, a restart trusts the logs.
    /// Returns whether it was marked clean (not when a partition is failed).
    pub fn shutdown(&self) -> Result<bool> {
        let failed = self.checkpoint_with(true)?;
        if let Some(tp) = failed.first() {
            // A failed partition's files may be past what it synced: the next start must
            // recover them, so this shutdown is not marked clean.
            crate::log_warn!(
                "{} partition(s) failed ({tp} first): the shutdown is not marked clean, so the next start recovers the logs past their recovery points",
                failed.len()
            );
            return Ok(false);
        }
        let marker = self.data_dir.join(DataDir::CLEAN_SHUTDOWN_FILE);
        checkpoint::rewrite_atomic(&marker, b"")?;
        Ok(true)
    }
}

/// A log's figures after a checkpoint's work on it and whether it is failed; `None` when
/// it was archived meanwhile.
type LogFigures = (TopicPartition, Option<(LogSummary, bool)>);

/// A log's part of a checkpoint that shares one file-system sync, between the two halves.
struct Staged {
    tp: TopicPartition,
    shared: SharedLog,
    ticket: Option<FlushTicket>,
    /// The staged `leader-epoch-checkpoint` and the log's generation then.
    epochs: Option<StagedEpochs>,
}

enum Stage {
    Staged(Staged),
    /// Nothing to sync (archived, failed or failing): its figures now.
    Done(LogFigures),
}

/// Logs a pass visits on the calling thread alone; more are shared among
/// [`LOG_IO_THREADS`] threads.
pub(super) const LOG_IO_INLINE_UP_TO: usize = 32;

/// Threads that flush logs at once. The work is fsyncs, not CPU: concurrent fsyncs share the
/// filesystem's journal commits, so a pass over 2,000 changed logs (a shutdown after one
/// fetch round) takes a fraction of the time it takes one log after another.
const LOG_IO_THREADS: usize = 8;

/// Runs `work` on every item, on a few threads when there are many (see
/// [`LOG_IO_INLINE_UP_TO`]), and hands each result to `done` on the calling thread as it
/// comes, so the caller keeps its own state and beats the watchdog. In-process fault
/// injection arms the calling thread, so passes over few logs stay on it.
fn for_each_log_io<T: Send, R: Send>(
    items: Vec<T>,
    work: impl Fn(T) -> R + Sync,
    mut done: impl FnMut(R),
) {
    if items.len() <= LOG_IO_INLINE_UP_TO {
        for item in items {
            done(work(item));
        }
        return;
    }
    let threads = LOG_IO_THREADS.min(items.len());
    let queue = Mutex::new(items.into_iter());
    let next = || {
        queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .next()
    };
    // The workers log under the caller's name (`checkpoint-task-io`), so a storage error
    // they report says which pass met it.
    let name = format!("{}-io", std::thread::current().name().unwrap_or("log"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        let mut spawned = 0;
        for _ in 0..threads {
            let tx = tx.clone();
            let (next, work) = (&next, &work);
            let worker =
                std::thread::Builder::new()
                    .name(name.clone())
                    .spawn_scoped(scope, move || {
                        while let Some(item) = next() {
                            if tx.send(work(item)).is_err() {
                                break;
                            }
                        }
                    });
            // A thread the system refuses (a task limit) leaves its share to the others.
            spawned += usize::from(worker.is_ok());
        }
        drop(tx);
        if spawned == 0 {
            while let Some(item) = next() {
                done(work(item));
            }
            return;
        }
        for r in rx {
            done(r);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many items: each is worked once, on named workers other than the caller, and every
    /// result comes back to the caller; few: all on the caller.
    #[test]
    fn many_items_go_to_named_workers_and_few_stay_on_the_caller() {
        let caller = std::thread::current().id();
        let n = LOG_IO_INLINE_UP_TO * 4;
        let on = |i: usize| {
            (
                i,
                std::thread::current().id(),
                std::thread::current().name().map(String::from),
            )
        };
        let mut got = Vec::new();
        std::thread::Builder::new()
            .name("checkpoint-task".into())
            .spawn(move || {
                let me = std::thread::current().id();
                let mut got = Vec::new();
                for_each_log_io((0..n).collect(), on, |r| got.push(r));
                (me, got)
            })
            .unwrap()
            .join()
            .map(|(me, g)| {
                assert!(g.iter().all(|(_, t, _)| *t != me), "worked on the caller");
                got = g;
            })
            .unwrap();
        let mut seen: Vec<usize> = got.iter().map(|(i, _, _)| *i).collect();
        seen.sort();
        assert_eq!(seen, (0..n).collect::<Vec<_>>());
        assert!(
            got.iter()
                .all(|(_, _, name)| name.as_deref() == Some("checkpoint-task-io"))
        );
        let mut few = Vec::new();
        for_each_log_io((0..LOG_IO_INLINE_UP_TO).collect(), on, |r| few.push(r));
        assert_eq!(few.len(), LOG_IO_INLINE_UP_TO);
        assert!(few.iter().all(|(_, t, _)| *t == caller));
    }
}
