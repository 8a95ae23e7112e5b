//! Where a client request goes: the one exhaustive classification of the
//! opcodes. A new opcode does not compile until it is routed here.

use rzk_wire::{OpCode, Request};

use crate::core::ReplyAs;

/// The stage a request goes to.
#[derive(Debug)]
pub(crate) enum Route {
    /// A change: to the leader's prep, answered when its txn is applied here.
    Write(ReplyAs),
    /// closeSession: a txn too, then the connection closes.
    Close,
    /// sync: the I6b barrier, answered once this member applied up to it.
    Sync,
    /// addauth: answered at once, outside the ordered pipeline (doc §12.6).
    Auth,
    /// Everything served from the local tree, in order with the session's writes.
    Read,
}

/// Routes a request.
pub(crate) fn route(request: &Request) -> Route {
    let op = request.opcode();
    match request {
        Request::Create(_)
        | Request::Create2(_)
        | Request::CreateContainer(_)
        | Request::CreateTtl(_)
        | Request::Delete(_)
        | Request::SetData(_)
        | Request::SetAcl(_)
        | Request::Check(_) => Route::Write(ReplyAs::Op(op)),
        Request::Multi(m) => {
            Route::Write(ReplyAs::Multi(m.ops.iter().map(|o| o.opcode()).collect()))
        }
        Request::CloseSession => Route::Close,
        Request::Sync(_) => Route::Sync,
        Request::Auth(_) => Route::Auth,
        Request::Exists(_)
        | Request::GetData(_)
        | Request::GetAcl(_)
        | Request::GetChildren(_)
        | Request::GetChildren2(_)
        | Request::Ping
        | Request::Reconfig(_)
        | Request::CheckWatches(_)
        | Request::RemoveWatches(_)
        | Request::MultiRead(_)
        | Request::SetWatches(_)
        | Request::Sasl(_)
        | Request::GetEphemerals(_)
        | Request::GetAllChildrenNumber(_)
        | Request::SetWatches2(_)
        | Request::AddWatch(_)
        | Request::WhoAmI => Route::Read,
    }
}

/// Whether an opcode is a write (for requests whose record could not be
/// decoded: a malformed write is still answered in the session's write order).
pub(crate) fn is_write(op: OpCode) -> bool {
    matches!(
        op,
        OpCode::Create
            | OpCode::Create2
            | OpCode::CreateContainer
            | OpCode::CreateTtl
            | OpCode::Delete
            | OpCode::SetData
            | OpCode::SetAcl
            | OpCode::Check
            | OpCode::Multi
            | OpCode::CloseSession
    )
}
