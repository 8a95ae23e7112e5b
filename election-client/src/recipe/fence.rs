//! Fencing: the step between a proven position and a usable grant, shared by the
//! candidacy machine (latch, selector, mutex) and the queue machine (read-write lock,
//! semaphore).
//!
//! A position that is first in line and owned by the current session may still be
//! acting on a stale view: the session could be lost a moment later, and another
//! holder could be granted while this one still writes. So a grant carries a
//! [`FencingToken`] that the holder stamps on its writes:
//! - [`Fence::Bump`] reads the epoch znode, then in one multi checks that our node
//!   still exists and sets the epoch to the next value at the version read. Only one
//!   holder can win a given version, so no two grants share an epoch, and a holder
//!   whose node died with its session cannot fence at all. A version conflict means
//!   someone else fenced first: back to candidacy, after a backoff.
//! - [`Fence::Observe`] only reads the epoch (a reader under writers that bump it).
//!
//! A missing epoch znode is created (parents as persistent nodes, data `0`); a lost
//! race to create it is fine. The functions here are sans-IO: they say which
//! [`Call`] to make next and what an answer means; the machine that holds the
//! position acts on it.

use bytes::Bytes;
use rzk_wire::CreateMode;
use rzk_zxid::Zxid;

use super::engine::{Call, Reply};
use crate::client::{Op as MultiOp, OpResult as MultiResult};
use crate::error::{Error, Result};
use crate::types::{FencingToken, Stat};

/// How a grant is fenced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fence {
    /// No token.
    None,
    /// Increment this epoch znode (a multi that checks the node exists): a token no
    /// other grant shares.
    Bump(String),
    /// Read this epoch znode: the token of the last fenced grant before this one (a
    /// reader under writers that [`Fence::Bump`] the same znode).
    Observe(String),
}

/// Why a bump of the epoch znode failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BumpError {
    /// The epoch znode's version changed: someone else fenced first.
    EpochMoved,
    /// The epoch znode does not exist.
    EpochMissing,
    /// The candidate node does not exist any more.
    CandidateGone,
    /// Anything else (connection loss, expiry, ACL).
    Other(Error),
}

/// Where a fencing step stands; the machine keeps it with the id of the call it waits
/// for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FenceStep {
    /// Reading the epoch znode.
    Reading,
    /// Creating the missing epoch znode.
    Creating,
    /// The multi that checks our node and sets the epoch to `value`.
    Bumping {
        /// The epoch this grant gets if the multi succeeds.
        value: u64,
    },
}

/// What the machine does after a fencing answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FenceNext {
    /// Make `call` and wait for it in `step`.
    Call(Call, FenceStep),
    /// Fenced: grant, with this token (none for [`Fence::None`]).
    Grant(Option<FencingToken>),
    /// Our node is gone: the grant cannot be proven.
    NodeGone,
    /// Evaluate again after a backoff (someone else fenced, a failed call, an epoch
    /// znode that does not hold a number).
    Retry,
}

impl Fence {
    /// The first step once a position is proven.
    pub(crate) fn start(&self) -> FenceNext {
        match self {
            Fence::None => FenceNext::Grant(None),
            Fence::Bump(path) | Fence::Observe(path) => FenceNext::Call(
                Call::GetData {
                    path: path.clone(),
                    watch: false,
                },
                FenceStep::Reading,
            ),
        }
    }

    /// The answer to the call made in `step`; `node` gives the full path of our node
    /// (asked for only when a bump is next).
    pub(crate) fn on_reply(
        &self,
        step: FenceStep,
        node: impl FnOnce() -> Option<String>,
        reply: Reply,
    ) -> FenceNext {
        match (step, reply) {
            (FenceStep::Reading, Reply::Data(r)) => self.on_read(node, r),
            (FenceStep::Creating, Reply::Created(Ok(_) | Err(Error::NodeExists { .. }))) => {
                self.start()
            }
            (FenceStep::Bumping { value }, Reply::Multi(r)) => match bump_result(r) {
                Ok(stat) => FenceNext::Grant(Some(FencingToken {
                    epoch: value,
                    zxid: stat.mzxid,
                })),
                Err(BumpError::EpochMissing) => self.create(),
                Err(BumpError::CandidateGone) => FenceNext::NodeGone,
                // Someone else fenced in between, or the call failed: look again later.
                Err(BumpError::EpochMoved | BumpError::Other(_)) => FenceNext::Retry,
            },
            // A failed create of the epoch znode, or an answer of the wrong shape
            // (which cannot happen): start the evaluation over.
            (_, _) => FenceNext::Retry,
        }
    }

    fn on_read(
        &self,
        node: impl FnOnce() -> Option<String>,
        r: Result<(Bytes, Stat)>,
    ) -> FenceNext {
        let (data, stat) = match r {
            Ok(v) => v,
            Err(Error::NoNode { .. }) => {
                return match self {
                    // No writer was ever fenced: epoch 0.
                    Fence::Observe(_) => FenceNext::Grant(Some(FencingToken {
                        epoch: 0,
                        zxid: Zxid::from_u64(0),
                    })),
                    Fence::Bump(_) => self.create(),
                    Fence::None => FenceNext::Retry,
                };
            }
            Err(_) => return FenceNext::Retry,
        };
        let Some(current) = parse_epoch(&data) else {
            // Not ours to repair: keep retrying (visible in the log), never overwrite
            // someone's data.
            tracing::warn!(fence = ?self, "the epoch znode does not hold a number");
            return FenceNext::Retry;
        };
        match self {
            Fence::Observe(_) => FenceNext::Grant(Some(FencingToken {
                epoch: current,
                zxid: stat.mzxid,
            })),
            Fence::Bump(epoch_path) => {
                let Some(node) = node() else {
                    return FenceNext::NodeGone;
                };
                let value = current.saturating_add(1);
                FenceNext::Call(
                    bump_call(node, epoch_path, stat.version, value),
                    FenceStep::Bumping { value },
                )
            }
            Fence::None => FenceNext::Retry,
        }
    }

    fn create(&self) -> FenceNext {
        match self {
            Fence::Bump(path) => FenceNext::Call(create_epoch_call(path), FenceStep::Creating),
            Fence::Observe(_) | Fence::None => FenceNext::Retry,
        }
    }
}

/// Create the epoch znode `path` with data `0`, parents as persistent nodes (an epoch
/// must outlive every election it fences, so never a container).
pub(crate) fn create_epoch_call(path: &str) -> Call {
    Call::Create {
        path: path.to_owned(),
        data: Bytes::from_static(b"0"),
        mode: CreateMode::Persistent,
        ttl_ms: None,
        parents: Some(CreateMode::Persistent),
    }
}

/// One multi: check that `candidate` exists, and set `epoch_path` to `value` (decimal)
/// if its version is still `version`.
pub(crate) fn bump_call(candidate: String, epoch_path: &str, version: i32, value: u64) -> Call {
    Call::Multi {
        ops: vec![
            MultiOp::Check {
                path: candidate,
                version: -1,
            },
            MultiOp::SetData {
                path: epoch_path.to_owned(),
                data: Bytes::from(value.to_string()),
                version,
            },
        ],
    }
}

/// What the answer to a [`bump_call`] means: the epoch znode's stat after the
/// increment, or why there was none.
pub(crate) fn bump_result(r: Result<Vec<MultiResult>>) -> std::result::Result<Stat, BumpError> {
    match r {
        Ok(results) => match results.get(1) {
            Some(MultiResult::SetData(stat)) => Ok(*stat),
            _ => Err(BumpError::Other(Error::Transport(
                "multi without a setData result".into(),
            ))),
        },
        Err(Error::MultiFailed { index: 0, source }) if matches!(*source, Error::NoNode { .. }) => {
            Err(BumpError::CandidateGone)
        }
        Err(Error::MultiFailed { index: 1, source }) => match *source {
            Error::BadVersion { .. } => Err(BumpError::EpochMoved),
            Error::NoNode { .. } => Err(BumpError::EpochMissing),
            other => Err(BumpError::Other(other)),
        },
        Err(e) => Err(BumpError::Other(e)),
    }
}

/// The epoch znode holds a decimal number; empty data counts as 0.
pub fn parse_epoch(data: &[u8]) -> Option<u64> {
    if data.is_empty() {
        return Some(0);
    }
    std::str::from_utf8(data).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(index: usize, source: Error) -> Result<Vec<MultiResult>> {
        Err(Error::MultiFailed {
            index,
            source: Box::new(source),
        })
    }

    #[test]
    fn bump_answers_are_classified_by_the_op_that_failed() {
        let stat = Stat {
            version: 3,
            ..Stat::default()
        };
        assert_eq!(
            bump_result(Ok(vec![MultiResult::Checked, MultiResult::SetData(stat)])),
            Ok(stat)
        );
        let gone = Error::NoNode {
            path: "/e/n".into(),
        };
        assert_eq!(bump_result(failed(0, gone)), Err(BumpError::CandidateGone));
        let moved = Error::BadVersion { path: "/ep".into() };
        assert_eq!(bump_result(failed(1, moved)), Err(BumpError::EpochMoved));
        let missing = Error::NoNode { path: "/ep".into() };
        assert_eq!(
            bump_result(failed(1, missing)),
            Err(BumpError::EpochMissing)
        );
        assert_eq!(
            bump_result(Err(Error::ConnectionLoss)),
            Err(BumpError::Other(Error::ConnectionLoss))
        );
        assert!(matches!(
            bump_result(Ok(vec![MultiResult::Checked])),
            Err(BumpError::Other(_))
        ));
    }

    #[test]
    fn a_missing_epoch_is_created_when_bumping_and_is_zero_when_observing() {
        let nonode = || Reply::Data(Err(Error::NoNode { path: "/ep".into() }));
        let bump = Fence::Bump("/ep".into());
        assert_eq!(
            bump.on_reply(FenceStep::Reading, || Some("/e/n".into()), nonode()),
            FenceNext::Call(create_epoch_call("/ep"), FenceStep::Creating)
        );
        let observe = Fence::Observe("/ep".into());
        assert_eq!(
            observe.on_reply(FenceStep::Reading, || None, nonode()),
            FenceNext::Grant(Some(FencingToken {
                epoch: 0,
                zxid: Zxid::from_u64(0)
            }))
        );
    }

    #[test]
    fn parse_epoch_accepts_numbers_and_empty_data_only() {
        assert_eq!(parse_epoch(b""), Some(0));
        assert_eq!(parse_epoch(b"41"), Some(41));
        assert_eq!(parse_epoch(b" 7\n"), Some(7));
        assert_eq!(parse_epoch(b"\xff-x"), None);
        assert_eq!(parse_epoch(b"-1"), None);
    }
}
