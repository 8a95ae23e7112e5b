//! multi (14) and multiRead (22): sequences of `(MultiHeader, record)` pairs
//! ended by a terminator header, with no count (docs/client-protocol.md, "multi
//! and multiRead").

use bytes::{BufMut, BytesMut};

use crate::codes::{ErrorCode, OpCode};
use crate::error::WireError;
use crate::jute::{self, Reader, Record, Strictness};
use crate::records::{
    CheckVersionRequest, Create2Response, CreateRequest, CreateResponse, CreateTtlRequest,
    DeleteRequest, ErrorResponse, GetChildrenRequest, GetChildrenResponse, GetDataRequest,
    GetDataResponse, SetDataRequest, Stat,
};

/// The header before every op and result of a multi, and the terminator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MultiHeader {
    /// The op's opcode, or -1 for an error result and the terminator.
    pub op: i32,
    /// True only in the terminator.
    pub done: bool,
    /// -1 in requests (ignored); 0 or an error code in results; -1 in the
    /// terminator.
    pub err: i32,
}

impl MultiHeader {
    /// The header that ends every multi request and response: `{-1, true, -1}`.
    pub const TERMINATOR: MultiHeader = MultiHeader {
        op: -1,
        done: true,
        err: -1,
    };

    fn put(self, dst: &mut BytesMut) {
        dst.put_i32(self.op);
        jute::put_bool(dst, self.done);
        dst.put_i32(self.err);
    }

    fn get(r: &mut Reader<'_>) -> Result<(MultiHeader, usize), WireError> {
        let offset = r.position();
        let header = MultiHeader {
            op: r.i32("MultiHeader.type")?,
            done: r.bool("MultiHeader.done")?,
            err: r.i32("MultiHeader.err")?,
        };
        Ok((header, offset))
    }
}

impl Record for MultiHeader {
    const NAME: &'static str = "MultiHeader";
    const ENCODED_BYTES_MIN: usize = 9;

    fn encode(&self, dst: &mut BytesMut) {
        self.put(dst);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(MultiHeader::get(r)?.0)
    }
}

/// One write inside a multi (14).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MultiOp {
    /// create (1); answered as a type-1 result.
    Create(CreateRequest),
    /// create2 (15); ZooKeeper answers it as a plain create (type 1).
    Create2(CreateRequest),
    /// createContainer (19); answered as a type-15 result.
    CreateContainer(CreateRequest),
    /// createTTL (21); answered as a type-15 result.
    CreateTtl(CreateTtlRequest),
    /// delete (2).
    Delete(DeleteRequest),
    /// setData (5).
    SetData(SetDataRequest),
    /// check (13).
    Check(CheckVersionRequest),
}

impl MultiOp {
    /// The op's opcode, as its MultiHeader carries it.
    pub fn opcode(&self) -> OpCode {
        match self {
            MultiOp::Create(_) => OpCode::Create,
            MultiOp::Create2(_) => OpCode::Create2,
            MultiOp::CreateContainer(_) => OpCode::CreateContainer,
            MultiOp::CreateTtl(_) => OpCode::CreateTtl,
            MultiOp::Delete(_) => OpCode::Delete,
            MultiOp::SetData(_) => OpCode::SetData,
            MultiOp::Check(_) => OpCode::Check,
        }
    }

    /// The path the op works on.
    pub fn path(&self) -> &str {
        match self {
            MultiOp::Create(r) | MultiOp::Create2(r) | MultiOp::CreateContainer(r) => &r.path,
            MultiOp::CreateTtl(r) => &r.path,
            MultiOp::Delete(r) => &r.path,
            MultiOp::SetData(r) => &r.path,
            MultiOp::Check(r) => &r.path,
        }
    }

    fn encode_record(&self, dst: &mut BytesMut) {
        match self {
            MultiOp::Create(r) | MultiOp::Create2(r) | MultiOp::CreateContainer(r) => r.encode(dst),
            MultiOp::CreateTtl(r) => r.encode(dst),
            MultiOp::Delete(r) => r.encode(dst),
            MultiOp::SetData(r) => r.encode(dst),
            MultiOp::Check(r) => r.encode(dst),
        }
    }

    fn decode_record(op: OpCode, r: &mut Reader<'_>) -> Option<Result<MultiOp, WireError>> {
        let decoded = match op {
            OpCode::Create => CreateRequest::decode(r).map(MultiOp::Create),
            OpCode::Create2 => CreateRequest::decode(r).map(MultiOp::Create2),
            OpCode::CreateContainer => CreateRequest::decode(r).map(MultiOp::CreateContainer),
            OpCode::CreateTtl => CreateTtlRequest::decode(r).map(MultiOp::CreateTtl),
            OpCode::Delete => DeleteRequest::decode(r).map(MultiOp::Delete),
            OpCode::SetData => SetDataRequest::decode(r).map(MultiOp::SetData),
            OpCode::Check => CheckVersionRequest::decode(r).map(MultiOp::Check),
            OpCode::Notification
            | OpCode::Exists
            | OpCode::GetData
            | OpCode::GetAcl
            | OpCode::SetAcl
            | OpCode::GetChildren
            | OpCode::Sync
            | OpCode::Ping
            | OpCode::GetChildren2
            | OpCode::Multi
            | OpCode::Reconfig
            | OpCode::CheckWatches
            | OpCode::RemoveWatches
            | OpCode::DeleteContainer
            | OpCode::MultiRead
            | OpCode::Auth
            | OpCode::SetWatches
            | OpCode::Sasl
            | OpCode::GetEphemerals
            | OpCode::GetAllChildrenNumber
            | OpCode::SetWatches2
            | OpCode::AddWatch
            | OpCode::WhoAmI
            | OpCode::CreateSession
            | OpCode::CloseSession
            | OpCode::Error => return None,
        };
        Some(decoded)
    }
}

/// One read inside a multiRead (22).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MultiReadOp {
    /// getChildren (8).
    GetChildren(GetChildrenRequest),
    /// getData (4).
    GetData(GetDataRequest),
}

impl MultiReadOp {
    /// The op's opcode, as its MultiHeader carries it.
    pub fn opcode(&self) -> OpCode {
        match self {
            MultiReadOp::GetChildren(_) => OpCode::GetChildren,
            MultiReadOp::GetData(_) => OpCode::GetData,
        }
    }

    /// The path the op reads.
    pub fn path(&self) -> &str {
        match self {
            MultiReadOp::GetChildren(r) => &r.path,
            MultiReadOp::GetData(r) => &r.path,
        }
    }

    fn encode_record(&self, dst: &mut BytesMut) {
        match self {
            MultiReadOp::GetChildren(r) => r.encode(dst),
            MultiReadOp::GetData(r) => r.encode(dst),
        }
    }

    fn decode_record(op: OpCode, r: &mut Reader<'_>) -> Option<Result<MultiReadOp, WireError>> {
        match op {
            OpCode::GetChildren => {
                Some(GetChildrenRequest::decode(r).map(MultiReadOp::GetChildren))
            }
            OpCode::GetData => Some(GetDataRequest::decode(r).map(MultiReadOp::GetData)),
            OpCode::Notification
            | OpCode::Create
            | OpCode::Delete
            | OpCode::Exists
            | OpCode::SetData
            | OpCode::GetAcl
            | OpCode::SetAcl
            | OpCode::Sync
            | OpCode::Ping
            | OpCode::GetChildren2
            | OpCode::Check
            | OpCode::Multi
            | OpCode::Create2
            | OpCode::Reconfig
            | OpCode::CheckWatches
            | OpCode::RemoveWatches
            | OpCode::CreateContainer
            | OpCode::DeleteContainer
            | OpCode::CreateTtl
            | OpCode::MultiRead
            | OpCode::Auth
            | OpCode::SetWatches
            | OpCode::Sasl
            | OpCode::GetEphemerals
            | OpCode::GetAllChildrenNumber
            | OpCode::SetWatches2
            | OpCode::AddWatch
            | OpCode::WhoAmI
            | OpCode::CreateSession
            | OpCode::CloseSession
            | OpCode::Error => None,
        }
    }
}

/// Reads `(header, op)` pairs until a header with `done` set. The terminator's
/// type and err are ignored, as ZooKeeper ignores them. An op type that `decode`
/// does not accept is [`WireError::InvalidValue`] on `MultiHeader.type`, which
/// the server answers with MARSHALLINGERROR (mixing reads and writes or an
/// unknown type: docs/client-protocol.md, "Request layout").
fn decode_ops<T>(
    r: &mut Reader<'_>,
    decode: fn(OpCode, &mut Reader<'_>) -> Option<Result<T, WireError>>,
) -> Result<Vec<T>, WireError> {
    let mut ops = Vec::new();
    loop {
        let (header, offset) = MultiHeader::get(r)?;
        if header.done {
            return Ok(ops);
        }
        let invalid = WireError::InvalidValue {
            field: "MultiHeader.type",
            offset,
            value: i64::from(header.op),
        };
        let Some(op) = OpCode::from_i32(header.op) else {
            return Err(invalid);
        };
        match decode(op, r) {
            Some(decoded) => ops.push(decoded?),
            None => return Err(invalid),
        }
    }
}

/// The body of a multi (14) request: writes applied all or nothing.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MultiRequest {
    /// The ops, in order. May be empty (ZooKeeper accepts an empty multi).
    pub ops: Vec<MultiOp>,
}

impl Record for MultiRequest {
    const NAME: &'static str = "MultiRequest";
    const ENCODED_BYTES_MIN: usize = 9;

    fn encode(&self, dst: &mut BytesMut) {
        for op in &self.ops {
            MultiHeader {
                op: op.opcode().as_i32(),
                done: false,
                err: -1,
            }
            .put(dst);
            op.encode_record(dst);
        }
        MultiHeader::TERMINATOR.put(dst);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(MultiRequest {
            ops: decode_ops(r, MultiOp::decode_record)?,
        })
    }
}

/// The body of a multiRead (22) request: reads evaluated independently.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MultiReadRequest {
    /// The ops, in order.
    pub ops: Vec<MultiReadOp>,
}

impl Record for MultiReadRequest {
    const NAME: &'static str = "MultiReadRequest";
    const ENCODED_BYTES_MIN: usize = 9;

    fn encode(&self, dst: &mut BytesMut) {
        for op in &self.ops {
            MultiHeader {
                op: op.opcode().as_i32(),
                done: false,
                err: -1,
            }
            .put(dst);
            op.encode_record(dst);
        }
        MultiHeader::TERMINATOR.put(dst);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(MultiReadRequest {
            ops: decode_ops(r, MultiReadOp::decode_record)?,
        })
    }
}

/// One result of a multi or multiRead reply (docs/client-protocol.md, "Result
/// layout" and "multiRead").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MultiResult {
    /// Type 1: a create or create2 sub-op succeeded.
    Create(CreateResponse),
    /// Type 15: a createContainer or createTTL sub-op succeeded.
    Create2(Create2Response),
    /// Type 2: a delete succeeded (no record).
    Delete,
    /// Type 5: a setData succeeded.
    SetData(Stat),
    /// Type 13: a check succeeded (no record).
    Check,
    /// Type 8: a multiRead getChildren.
    GetChildren(GetChildrenResponse),
    /// Type 4: a multiRead getData.
    GetData(GetDataResponse),
    /// Type -1: a failed multi reports every sub-op this way: code 0 for the
    /// ones before the failure (rolled back), the real code for the failing one,
    /// RUNTIMEINCONSISTENCY after it. In a multiRead, a failed read.
    Error(ErrorCode),
}

impl MultiResult {
    fn header_type(&self) -> OpCode {
        match self {
            MultiResult::Create(_) => OpCode::Create,
            MultiResult::Create2(_) => OpCode::Create2,
            MultiResult::Delete => OpCode::Delete,
            MultiResult::SetData(_) => OpCode::SetData,
            MultiResult::Check => OpCode::Check,
            MultiResult::GetChildren(_) => OpCode::GetChildren,
            MultiResult::GetData(_) => OpCode::GetData,
            MultiResult::Error(_) => OpCode::Error,
        }
    }

    fn encode(&self, dst: &mut BytesMut) {
        // Every success result carries err 0; only error results carry a code.
        let err = if let MultiResult::Error(code) = self {
            code.as_i32()
        } else {
            0
        };
        MultiHeader {
            op: self.header_type().as_i32(),
            done: false,
            err,
        }
        .put(dst);
        match self {
            MultiResult::Create(r) => r.encode(dst),
            MultiResult::Create2(r) => r.encode(dst),
            MultiResult::Delete | MultiResult::Check => {}
            MultiResult::SetData(stat) => stat.encode(dst),
            MultiResult::GetChildren(r) => r.encode(dst),
            MultiResult::GetData(r) => r.encode(dst),
            MultiResult::Error(code) => ErrorResponse { err: *code }.encode(dst),
        }
    }

    /// Decodes one result after its header. Strict readers also require a
    /// success header to carry err 0 and an error header's err to equal its
    /// ErrorResponse, which is what ZooKeeper writes.
    fn decode(header: MultiHeader, offset: usize, r: &mut Reader<'_>) -> Result<Self, WireError> {
        let invalid = |field, value: i32| WireError::InvalidValue {
            field,
            offset,
            value: i64::from(value),
        };
        let Some(op) = OpCode::from_i32(header.op) else {
            return Err(invalid("MultiHeader.type", header.op));
        };
        let strict = r.strictness() == Strictness::Strict;
        if op != OpCode::Error && strict && header.err != 0 {
            return Err(invalid("MultiHeader.err", header.err));
        }
        let result = match op {
            OpCode::Create => MultiResult::Create(CreateResponse::decode(r)?),
            OpCode::Create2 => MultiResult::Create2(Create2Response::decode(r)?),
            OpCode::Delete => MultiResult::Delete,
            OpCode::SetData => MultiResult::SetData(Stat::decode(r)?),
            OpCode::Check => MultiResult::Check,
            OpCode::GetChildren => MultiResult::GetChildren(GetChildrenResponse::decode(r)?),
            OpCode::GetData => MultiResult::GetData(GetDataResponse::decode(r)?),
            OpCode::Error => {
                let code = ErrorResponse::decode(r)?.err;
                if strict && header.err != code.as_i32() {
                    return Err(invalid("MultiHeader.err", header.err));
                }
                MultiResult::Error(code)
            }
            OpCode::Notification
            | OpCode::Exists
            | OpCode::GetAcl
            | OpCode::SetAcl
            | OpCode::Sync
            | OpCode::Ping
            | OpCode::GetChildren2
            | OpCode::Multi
            | OpCode::Reconfig
            | OpCode::CheckWatches
            | OpCode::RemoveWatches
            | OpCode::CreateContainer
            | OpCode::DeleteContainer
            | OpCode::CreateTtl
            | OpCode::MultiRead
            | OpCode::Auth
            | OpCode::SetWatches
            | OpCode::Sasl
            | OpCode::GetEphemerals
            | OpCode::GetAllChildrenNumber
            | OpCode::SetWatches2
            | OpCode::AddWatch
            | OpCode::WhoAmI
            | OpCode::CreateSession
            | OpCode::CloseSession => return Err(invalid("MultiHeader.type", header.op)),
        };
        Ok(result)
    }
}

/// The body of a multi or multiRead reply. The ReplyHeader's err is 0 even when
/// a multi failed; failure shows only in the results (docs/client-protocol.md,
/// "All or nothing").
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MultiResponse {
    /// One result per op, in op order.
    pub results: Vec<MultiResult>,
}

impl MultiResponse {
    /// The results of a multi that failed at op `failed` with `code`, for a
    /// multi of `op_count` ops: 0 before it, `code` at it, RUNTIMEINCONSISTENCY
    /// after it (docs/client-protocol.md, "Result layout").
    pub fn failed(op_count: usize, failed: usize, code: ErrorCode) -> MultiResponse {
        let results = (0..op_count)
            .map(|i| {
                MultiResult::Error(match i.cmp(&failed) {
                    std::cmp::Ordering::Less => ErrorCode::Ok,
                    std::cmp::Ordering::Equal => code,
                    std::cmp::Ordering::Greater => ErrorCode::RuntimeInconsistency,
                })
            })
            .collect();
        MultiResponse { results }
    }

    /// The first error code of a failed multi (a non-zero error result), if any.
    pub fn first_error(&self) -> Option<ErrorCode> {
        self.results.iter().find_map(|r| {
            if let MultiResult::Error(code) = r {
                (*code != ErrorCode::Ok).then_some(*code)
            } else {
                None
            }
        })
    }
}

impl Record for MultiResponse {
    const NAME: &'static str = "MultiResponse";
    const ENCODED_BYTES_MIN: usize = 9;

    fn encode(&self, dst: &mut BytesMut) {
        for result in &self.results {
            result.encode(dst);
        }
        MultiHeader::TERMINATOR.put(dst);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let mut results = Vec::new();
        loop {
            let (header, offset) = MultiHeader::get(r)?;
            if header.done {
                if r.strictness() == Strictness::Strict && header != MultiHeader::TERMINATOR {
                    return Err(WireError::InvalidValue {
                        field: "MultiHeader.type",
                        offset,
                        value: i64::from(header.op),
                    });
                }
                return Ok(MultiResponse { results });
            }
            results.push(MultiResult::decode(header, offset, r)?);
        }
    }
}
