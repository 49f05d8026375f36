//! Kafka error codes the client meets (`common/protocol/Errors.java`) and what a follower
//! does about each. Callers branch on [`ErrorCode::action`], so the table below is the one
//! place that decides how a partition reacts to a broker's error.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub i16);

/// What the fetcher does with a partition that got this error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorAction {
    /// Not an error.
    None,
    /// Ask the leader for its log start and end and reset the fetch position (Kafka's rule).
    OffsetOutOfRange,
    /// The partition's leadership or metadata is stale: refresh metadata, then retry.
    RefreshMetadata,
    /// Back off and retry the same request.
    Retry,
    /// The fetch session must be reset.
    ResetSession,
    /// Fatal for this partition until the configuration changes; retried after a long backoff.
    Fatal,
}

impl ErrorCode {
    pub const NONE: ErrorCode = ErrorCode(0);
    pub const UNKNOWN_SERVER_ERROR: ErrorCode = ErrorCode(-1);
    pub const OFFSET_OUT_OF_RANGE: ErrorCode = ErrorCode(1);
    pub const CORRUPT_MESSAGE: ErrorCode = ErrorCode(2);
    pub const UNKNOWN_TOPIC_OR_PARTITION: ErrorCode = ErrorCode(3);
    pub const LEADER_NOT_AVAILABLE: ErrorCode = ErrorCode(5);
    pub const NOT_LEADER_OR_FOLLOWER: ErrorCode = ErrorCode(6);
    pub const COORDINATOR_LOAD_IN_PROGRESS: ErrorCode = ErrorCode(14);
    pub const COORDINATOR_NOT_AVAILABLE: ErrorCode = ErrorCode(15);
    pub const NOT_COORDINATOR: ErrorCode = ErrorCode(16);
    pub const TOPIC_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(29);
    pub const GROUP_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(30);
    pub const CLUSTER_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(31);
    pub const UNSUPPORTED_SASL_MECHANISM: ErrorCode = ErrorCode(33);
    pub const ILLEGAL_SASL_STATE: ErrorCode = ErrorCode(34);
    pub const UNSUPPORTED_VERSION: ErrorCode = ErrorCode(35);
    pub const TOPIC_ALREADY_EXISTS: ErrorCode = ErrorCode(36);
    pub const INVALID_REQUEST: ErrorCode = ErrorCode(42);
    pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(53);
    pub const SASL_AUTHENTICATION_FAILED: ErrorCode = ErrorCode(58);
    pub const FETCH_SESSION_ID_NOT_FOUND: ErrorCode = ErrorCode(70);
    pub const INVALID_FETCH_SESSION_EPOCH: ErrorCode = ErrorCode(71);
    pub const FENCED_LEADER_EPOCH: ErrorCode = ErrorCode(74);
    pub const UNKNOWN_LEADER_EPOCH: ErrorCode = ErrorCode(75);
    pub const OFFSET_NOT_AVAILABLE: ErrorCode = ErrorCode(78);
    pub const FETCH_SESSION_TOPIC_ID_ERROR: ErrorCode = ErrorCode(106);

    pub fn is_ok(self) -> bool {
        self.0 == 0
    }

    pub fn name(self) -> &'static str {
        match self.0 {
            -1 => "UNKNOWN_SERVER_ERROR",
            0 => "NONE",
            1 => "OFFSET_OUT_OF_RANGE",
            2 => "CORRUPT_MESSAGE",
            3 => "UNKNOWN_TOPIC_OR_PARTITION",
            4 => "INVALID_FETCH_SIZE",
            5 => "LEADER_NOT_AVAILABLE",
            6 => "NOT_LEADER_OR_FOLLOWER",
            7 => "REQUEST_TIMED_OUT",
            8 => "BROKER_NOT_AVAILABLE",
            9 => "REPLICA_NOT_AVAILABLE",
            10 => "MESSAGE_TOO_LARGE",
            12 => "OFFSET_METADATA_TOO_LARGE",
            13 => "NETWORK_EXCEPTION",
            14 => "COORDINATOR_LOAD_IN_PROGRESS",
            15 => "COORDINATOR_NOT_AVAILABLE",
            16 => "NOT_COORDINATOR",
            17 => "INVALID_TOPIC_EXCEPTION",
            19 => "NOT_ENOUGH_REPLICAS",
            22 => "ILLEGAL_GENERATION",
            24 => "INVALID_GROUP_ID",
            25 => "UNKNOWN_MEMBER_ID",
            27 => "REBALANCE_IN_PROGRESS",
            28 => "INVALID_COMMIT_OFFSET_SIZE",
            29 => "TOPIC_AUTHORIZATION_FAILED",
            30 => "GROUP_AUTHORIZATION_FAILED",
            31 => "CLUSTER_AUTHORIZATION_FAILED",
            33 => "UNSUPPORTED_SASL_MECHANISM",
            34 => "ILLEGAL_SASL_STATE",
            35 => "UNSUPPORTED_VERSION",
            36 => "TOPIC_ALREADY_EXISTS",
            37 => "INVALID_PARTITIONS",
            38 => "INVALID_REPLICATION_FACTOR",
            39 => "INVALID_REPLICA_ASSIGNMENT",
            40 => "INVALID_CONFIG",
            41 => "NOT_CONTROLLER",
            42 => "INVALID_REQUEST",
            44 => "POLICY_VIOLATION",
            47 => "INVALID_PRODUCER_EPOCH",
            48 => "INVALID_TXN_STATE",
            49 => "INVALID_PRODUCER_ID_MAPPING",
            50 => "INVALID_TRANSACTION_TIMEOUT",
            51 => "CONCURRENT_TRANSACTIONS",
            52 => "TRANSACTION_COORDINATOR_FENCED",
            53 => "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
            56 => "KAFKA_STORAGE_ERROR",
            58 => "SASL_AUTHENTICATION_FAILED",
            59 => "UNKNOWN_PRODUCER_ID",
            68 => "NON_EMPTY_GROUP",
            69 => "GROUP_ID_NOT_FOUND",
            70 => "FETCH_SESSION_ID_NOT_FOUND",
            71 => "INVALID_FETCH_SESSION_EPOCH",
            74 => "FENCED_LEADER_EPOCH",
            75 => "UNKNOWN_LEADER_EPOCH",
            76 => "UNSUPPORTED_COMPRESSION_TYPE",
            78 => "OFFSET_NOT_AVAILABLE",
            86 => "GROUP_SUBSCRIBED_TO_TOPIC",
            88 => "UNSTABLE_OFFSET_COMMIT",
            89 => "THROTTLING_QUOTA_EXCEEDED",
            90 => "PRODUCER_FENCED",
            100 => "UNKNOWN_TOPIC_ID",
            103 => "INCONSISTENT_TOPIC_ID",
            106 => "FETCH_SESSION_TOPIC_ID_ERROR",
            109 => "OFFSET_MOVED_TO_TIERED_STORAGE",
            110 => "FENCED_MEMBER_EPOCH",
            113 => "STALE_MEMBER_EPOCH",
            120 => "TRANSACTION_ABORTABLE",
            _ => "UNKNOWN_ERROR_CODE",
        }
    }

    pub fn action(self) -> ErrorAction {
        match self.0 {
            0 => ErrorAction::None,
            1 => ErrorAction::OffsetOutOfRange,
            3 | 5 | 6 | 9 | 56 | 74 | 100 | 103 => ErrorAction::RefreshMetadata,
            70 | 71 | 106 => ErrorAction::ResetSession,
            29 | 31 | 76 | 109 => ErrorAction::Fatal,
            _ => ErrorAction::Retry,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_follow_the_follower_table() {
        assert_eq!(ErrorCode(1).action(), ErrorAction::OffsetOutOfRange);
        assert_eq!(ErrorCode(6).action(), ErrorAction::RefreshMetadata);
        assert_eq!(ErrorCode(74).action(), ErrorAction::RefreshMetadata);
        assert_eq!(ErrorCode(2).action(), ErrorAction::Retry);
        assert_eq!(ErrorCode(75).action(), ErrorAction::Retry);
        assert_eq!(ErrorCode(29).action(), ErrorAction::Fatal);
        assert_eq!(ErrorCode(70).action(), ErrorAction::ResetSession);
        assert_eq!(ErrorCode(0).action(), ErrorAction::None);
        assert_eq!(ErrorCode(6).to_string(), "NOT_LEADER_OR_FOLLOWER (6)");
    }
}
