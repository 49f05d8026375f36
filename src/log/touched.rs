//! Which logs changed since each periodic pass of the log manager last looked at them, so
//! that a pass over an idle data dir visits none (the flush every second and the checkpoint
//! and retention every few seconds would otherwise lock each of 10,000 logs).
//!
//! Each log holds a flag per pass, under its own mutex, and takes the shared set's lock only
//! when a flag goes up: the first change after a pass looked at it. A pass drains its set,
//! then lowers a log's flag under the log's lock before it reads the log, so a change after
//! that raises it again. Invariant: a raised flag means the log is in its pass's set, or in
//! what a pass drained and has not yet read.

use crate::checkpoint::TopicPartition;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// The passes that visit only the logs that changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// `LogManager::flush_all`.
    Flush,
    /// `LogManager::checkpoint`.
    Checkpoint,
    /// `LogManager::apply_retention`.
    Retention,
}

impl Pass {
    /// Every pass: what a change to a log's bytes or figures concerns.
    pub const ALL: [Pass; 3] = [Pass::Flush, Pass::Checkpoint, Pass::Retention];
}

/// One `T` for each pass.
#[derive(Debug, Default)]
pub struct PerPass<T>([T; 3]);

impl<T> PerPass<T> {
    pub fn of(&self, pass: Pass) -> &T {
        let [flush, checkpoint, retention] = &self.0;
        match pass {
            Pass::Flush => flush,
            Pass::Checkpoint => checkpoint,
            Pass::Retention => retention,
        }
    }

    pub fn of_mut(&mut self, pass: Pass) -> &mut T {
        let [flush, checkpoint, retention] = &mut self.0;
        match pass {
            Pass::Flush => flush,
            Pass::Checkpoint => checkpoint,
            Pass::Retention => retention,
        }
    }
}

/// The partitions each pass is to visit; shared by the manager and its logs.
#[derive(Debug)]
pub struct Touched {
    sets: PerPass<Mutex<BTreeSet<TopicPartition>>>,
    /// With retention off nothing is collected for it.
    retention: bool,
}

impl Touched {
    pub fn new(retention: bool) -> Self {
        Touched {
            sets: Default::default(),
            retention,
        }
    }

    fn set(&self, pass: Pass) -> std::sync::MutexGuard<'_, BTreeSet<TopicPartition>> {
        self.sets
            .of(pass)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn add(&self, pass: Pass, tp: &TopicPartition) {
        if pass != Pass::Retention || self.retention {
            self.set(pass).insert(tp.clone());
        }
    }

    /// The partitions touched for `pass` since it last took them; the set is left empty.
    pub fn take(&self, pass: Pass) -> BTreeSet<TopicPartition> {
        std::mem::take(&mut *self.set(pass))
    }
}

/// A log's side: the sets it reports to (none for a log outside a manager) and which passes
/// already know it changed.
#[derive(Debug, Default)]
pub struct Marks {
    to: Option<Arc<Touched>>,
    up: PerPass<bool>,
}

impl Marks {
    /// From now on changes are reported to `to`; the log counts as changed for every pass.
    pub fn watch(&mut self, tp: &TopicPartition, to: Arc<Touched>) {
        self.to = Some(to);
        self.up = PerPass::default();
        self.raise(tp, &Pass::ALL);
    }

    /// The log changed in a way that concerns `passes`.
    pub fn raise(&mut self, tp: &TopicPartition, passes: &[Pass]) {
        let Some(to) = &self.to else {
            return;
        };
        for &p in passes {
            if !std::mem::replace(self.up.of_mut(p), true) {
                to.add(p, tp);
            }
        }
    }

    /// `pass` is reading the log now (under its lock): later changes are reported again.
    pub fn lower(&mut self, pass: Pass) {
        *self.up.of_mut(pass) = false;
    }
}
