//! One client connection, served by one task: a reader that decodes frames
//! and hands them to the core, each request holding one of its connection's
//! slots and one of the server's until it is answered (a connection with too
//! many requests in flight stops being read; an idle one holds no server
//! slot), and a writer that drains the connection's [`Outbox`].
//!
//! Once its first frame is handled a connection is a future written by hand
//! ([`Serving`]), not an `async fn`: an idle session pays for its task's whole
//! future for as long as it lives, and a state machine written out keeps only
//! what the connection needs between two polls (an `async` reader and writer
//! joined in one task made the task 1.4 KiB). The waits that are rare (the
//! first frame, a request that finds no server slot or a full core queue) are
//! boxed futures, held only while they last.

use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use rzk_wire::server::Incoming;
use rzk_wire::{ServerCodec, WireError};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_util::codec::Decoder;

use crate::acl::AuthInfo;
use crate::config::FourLetterWhitelist;
use crate::core::{CoreMsg, Input, Permit, Req};
use crate::fourlw;
use crate::outbox::{ConnSlot, Next, Outbox};
use crate::watch::ConnId;

/// The most one read takes from a socket: a pipelined client is read in few
/// large reads.
const READ_BYTES_MAX: usize = 64 * 1024;

thread_local! {
    /// What every connection served on this thread reads into; the bytes
    /// read are then copied into a buffer of their own size (see
    /// [`FrameReader`]). Zeroed once, so that no read zeroes it again.
    static READ_SCRATCH: RefCell<Box<[u8]>> =
        RefCell::new(vec![0; READ_BYTES_MAX].into_boxed_slice());
}

/// What every connection needs to know.
#[derive(Debug)]
pub(crate) struct ConnCtx {
    pub(crate) core: mpsc::Sender<CoreMsg>,
    /// Requests in flight across all connections (`globalOutstandingLimit`).
    pub(crate) global: Arc<Semaphore>,
    /// Requests in flight on one connection (`rzk.connection.outstandingMax`).
    pub(crate) outstanding_max: usize,
    /// `rzk.connection.outgoingBytesMax`.
    pub(crate) outgoing_bytes_max: usize,
    /// `jute.maxbuffer`.
    pub(crate) frame_bytes_max: usize,
    /// A connection that sends no ConnectRequest in this time is closed
    /// (docs/client-protocol.md, "Connection limits").
    pub(crate) sessionless_timeout: Duration,
    pub(crate) whitelist: FourLetterWhitelist,
}

/// Serves one plain TCP connection until it closes; resolves to the
/// client's address.
pub(crate) fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    id: ConnId,
    ctx: Arc<ConnCtx>,
) -> Connection<TcpStream> {
    let _ = stream.set_nodelay(true);
    serve_stream(stream, peer, AuthInfo::for_peer(peer.ip()), id, ctx)
}

/// Serves one connection (plain TCP, or TLS) until it closes; resolves to
/// the client's address. `auth` is what the connection holds before any
/// auth packet: its address, and a TLS client certificate's subject.
pub(crate) fn serve_stream<S>(
    io: S,
    peer: SocketAddr,
    auth: AuthInfo,
    id: ConnId,
    ctx: Arc<ConnCtx>,
) -> Connection<S>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // The first frame's wait (a timer) and its hand-over (a whole
    // ConnectRequest) are large and happen once: a box of their own, gone
    // once the connection serves.
    Connection(Phase::Starting(Box::pin(first_frame(
        io, peer, auth, id, ctx,
    ))))
}

/// A connection's task (see [`serve`]).
pub(crate) struct Connection<S>(Phase<S>);

enum Phase<S> {
    /// Waiting for the first frame and handing it over.
    Starting(Pin<Box<dyn Future<Output = Serving<S>> + Send>>),
    Serving(Serving<S>),
}

impl<S: AsyncRead + AsyncWrite + Unpin> Future for Connection<S> {
    type Output = IpAddr;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<IpAddr> {
        let this = self.get_mut();
        loop {
            match &mut this.0 {
                Phase::Starting(first) => {
                    let serving = ready!(first.as_mut().poll(cx));
                    this.0 = Phase::Serving(serving);
                }
                Phase::Serving(s) => return s.poll(cx).map(|()| s.outbox.peer().ip()),
            }
        }
    }
}

/// Reads and hands over the connection's first frame. The connection then
/// serves requests if it was a ConnectRequest that the core took (the
/// connection carries a session); otherwise it only flushes what is queued
/// (a four-letter word's answer) and closes.
async fn first_frame<S: AsyncRead + AsyncWrite + Unpin>(
    mut io: S,
    peer: SocketAddr,
    auth: AuthInfo,
    id: ConnId,
    ctx: Arc<ConnCtx>,
) -> Serving<S> {
    let outbox = Arc::new(Outbox::new(
        id,
        peer,
        ctx.outgoing_bytes_max,
        ctx.outstanding_max,
    ));
    let mut reader = FrameReader::new(ServerCodec::with_frame_bytes_max(ctx.frame_bytes_max));
    let first = tokio::select! {
        r = tokio::time::timeout(ctx.sessionless_timeout, reader.next(&mut io)) => r,
        _ = outbox.cancelled() => Ok(None),
    };
    let registered = match first {
        Err(_) => {
            tracing::info!(%peer, "no ConnectRequest within the sessionless timeout: closing");
            false
        }
        Ok(None) => false,
        Ok(Some(Err(e))) => {
            tracing::info!(%peer, error = %e, "bad first frame: closing the connection");
            false
        }
        Ok(Some(Ok(Incoming::FourLetterWord(word)))) => {
            let text = if ctx.whitelist.allows(word.name()) {
                let (tx, rx) = oneshot::channel();
                let _ = ctx.core.send(CoreMsg::FourLetter { word, reply: tx }).await;
                rx.await.unwrap_or_default()
            } else {
                fourlw::not_whitelisted(word)
            };
            // One write: kazoo reads a single chunk.
            outbox.push(|b| b.extend_from_slice(text.as_bytes()));
            false
        }
        Ok(Some(Ok(Incoming::Connect(req)))) => {
            let msg = CoreMsg::Input(Input::Connect {
                conn: id,
                peer,
                auth,
                outbox: outbox.clone(),
                req,
            });
            ctx.core.send(msg).await.is_ok()
        }
        Ok(Some(Ok(_))) => false,
    };
    let read = if registered {
        Read::Frames
    } else {
        outbox.close_after_flush();
        Read::Done
    };
    Serving::new(io, reader, outbox, ctx, read)
}

/// A connection past its first frame: the reader and the writer, polled by
/// hand side by side in the connection's one task. It ends once both have.
///
/// Every field is here for as long as the connection lives, idle or not, and
/// the task that holds it is allocated in steps of 128 bytes (tokio aligns a
/// task to a cache line pair): 160 bytes of state make a 256-byte task,
/// 168 would make it 384. What a connection needs only now and then lives
/// elsewhere: its address and id in the [`Outbox`] (which the core holds
/// too), a rare wait in a box.
pub(crate) struct Serving<S> {
    io: S,
    reader: FrameReader,
    /// Also the connection's address and id.
    outbox: Arc<Outbox>,
    ctx: Arc<ConnCtx>,
    /// The reader's wait in [`Read::HandingOver`] or [`Read::Telling`].
    wait: Option<Pin<Box<dyn Future<Output = bool> + Send>>>,
    /// The bytes being written; empty, and no allocation, while idle.
    out: BytesMut,
    read: Read,
    write: Write,
    /// The reader holds one of the connection's request slots for its next
    /// request, taken before the request is read (backpressure, I7): a
    /// connection with `outstandingMax` requests in flight is not read until
    /// one is answered. Only its own slot, so an idle connection holds
    /// nothing anyone else needs.
    has_slot: bool,
}

/// Where the reader is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Read {
    /// Reading requests and handing them over.
    Frames,
    /// `wait` hands over a request that found no server slot or a full core
    /// queue: true once it is handed over, false if the connection or the
    /// core ended meanwhile.
    HandingOver,
    /// The reader ended; `wait` tells the core so (its queue was full).
    Telling,
    Done,
}

/// Where the writer is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Write {
    /// Writing what the outbox holds, or waiting for it.
    Draining,
    /// What was written is being flushed (TLS may hold back a record).
    Flushing,
    ShuttingDown,
    Done,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Serving<S> {
    fn new(io: S, reader: FrameReader, outbox: Arc<Outbox>, ctx: Arc<ConnCtx>, read: Read) -> Self {
        Serving {
            io,
            reader,
            outbox,
            ctx,
            wait: None,
            out: BytesMut::new(),
            read,
            write: Write::Draining,
            has_slot: false,
        }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        // Every event of the outbox (bytes queued, a close, a cancel, a slot
        // given back) wakes this task.
        self.outbox.register(cx.waker());
        let read = self.poll_read_side(cx);
        let write = self.poll_write_side(cx);
        if read.is_ready() && write.is_ready() {
            return Poll::Ready(());
        }
        // A writer that ended cancelled the outbox, and the cancel woke this
        // task, so the reader sees it on the next poll.
        Poll::Pending
    }

    /// Reads and hands over requests until the connection ends; then tells
    /// the core and lets the writer flush and close.
    fn poll_read_side(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match self.read {
                Read::Done => return Poll::Ready(()),
                Read::HandingOver | Read::Telling => {
                    let Some(wait) = self.wait.as_mut() else {
                        unreachable!("a reader that waits has its wait");
                    };
                    let handed_over = ready!(wait.as_mut().poll(cx));
                    self.wait = None;
                    if self.read == Read::Telling {
                        self.read = Read::Done;
                        self.outbox.close_after_flush();
                    } else if handed_over {
                        self.read = Read::Frames;
                    } else {
                        self.end_reading();
                    }
                }
                Read::Frames if self.outbox.is_cancelled() => self.end_reading(),
                Read::Frames => ready!(self.poll_request(cx)),
            }
        }
    }

    /// Reads one request and hands it over, or starts waiting to; Pending
    /// while there is nothing to read, or no slot to read with.
    fn poll_request(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.has_slot {
            ready!(self.outbox.poll_take_slot(cx));
            self.has_slot = true;
        }
        let item = ready!(self.reader.poll_next(&mut self.io, cx));
        let peer = self.outbox.peer();
        let req = match item {
            None => None,
            Some(Err(e)) => {
                // "Len error" and close, without a reply; the session lives on
                // (docs/client-protocol.md, "Frame size limit").
                tracing::warn!(%peer, error = %e, "closing the connection on a framing error");
                None
            }
            Some(Ok(Incoming::Request(frame))) => Some(Req::Frame(frame)),
            Some(Ok(Incoming::Malformed { xid, opcode, error })) => {
                tracing::debug!(%peer, %error, "malformed request");
                Some(Req::Malformed { xid, opcode })
            }
            Some(Ok(Incoming::UnknownOpCode { xid, .. })) => Some(Req::Unknown { xid }),
            Some(Ok(Incoming::Connect(_) | Incoming::FourLetterWord(_))) => None,
        };
        let Some(req) = req else {
            self.end_reading();
            return Poll::Ready(());
        };
        self.has_slot = false;
        let slot = self.outbox.taken_slot();
        match try_hand_over(&self.ctx, self.outbox.conn(), req, slot) {
            HandOver::Sent => {}
            HandOver::Closed => self.end_reading(),
            HandOver::Wait(req, slot) => {
                let wait = hand_over(self.ctx.clone(), self.outbox.clone(), req, slot);
                self.wait = Some(Box::pin(wait));
                self.read = Read::HandingOver;
            }
        }
        Poll::Ready(())
    }

    /// The reader ends: the core hears that the connection closed (the
    /// session lives on), and the writer flushes what is queued and closes.
    fn end_reading(&mut self) {
        if std::mem::take(&mut self.has_slot) {
            self.outbox.give_back_slot();
        }
        let conn = self.outbox.conn();
        match self.ctx.core.try_reserve() {
            Ok(slot) => slot.send(CoreMsg::Input(Input::Closed { conn })),
            Err(mpsc::error::TrySendError::Full(())) => {
                let core = self.ctx.core.clone();
                self.wait = Some(Box::pin(async move {
                    if let Ok(slot) = core.reserve().await {
                        slot.send(CoreMsg::Input(Input::Closed { conn }));
                    }
                    true
                }));
                self.read = Read::Telling;
                return;
            }
            Err(mpsc::error::TrySendError::Closed(())) => {}
        }
        self.read = Read::Done;
        self.outbox.close_after_flush();
    }

    /// Writes what the outbox holds until it closes (flushed) or the
    /// connection is cancelled; then shuts the socket's sending side.
    fn poll_write_side(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let io = Pin::new(&mut self.io);
            match self.write {
                Write::Done => return Poll::Ready(()),
                Write::ShuttingDown => {
                    let _ = ready!(io.poll_shutdown(cx));
                    self.write = Write::Done;
                }
                Write::Flushing => match ready!(io.poll_flush(cx)) {
                    Ok(()) => self.write = Write::Draining,
                    Err(_) => self.stop_writing(),
                },
                Write::Draining if self.outbox.is_cancelled() => self.stop_writing(),
                Write::Draining if self.out.is_empty() => match self.outbox.poll_next(cx) {
                    Next::Write(bytes) => self.out = bytes,
                    Next::Close => self.stop_writing(),
                    Next::Wait => return Poll::Pending,
                },
                Write::Draining => match ready!(io.poll_write(cx, &self.out)) {
                    Ok(0) | Err(_) => self.stop_writing(),
                    Ok(n) => {
                        self.out.advance(n);
                        if self.out.is_empty() {
                            // Idle again: no allocation kept for the next reply.
                            self.out = BytesMut::new();
                            self.write = Write::Flushing;
                        }
                    }
                },
            }
        }
    }

    /// The writer ends: what is not written is dropped and the reader stops.
    fn stop_writing(&mut self) {
        self.out = BytesMut::new();
        self.outbox.cancel();
        self.write = Write::ShuttingDown;
    }
}

/// What became of a request that was to be handed over without waiting.
enum HandOver {
    Sent,
    /// The core is gone.
    Closed,
    /// No server slot or no room in the core's queue: the request back.
    Wait(Req, ConnSlot),
}

fn try_hand_over(ctx: &ConnCtx, id: ConnId, req: Req, conn: ConnSlot) -> HandOver {
    let Ok(global) = ctx.global.clone().try_acquire_owned() else {
        return HandOver::Wait(req, conn);
    };
    match ctx.core.try_reserve() {
        Ok(slot) => {
            let permit = Permit { conn, global };
            slot.send(CoreMsg::Input(Input::Request {
                conn: id,
                req,
                permit,
            }));
            HandOver::Sent
        }
        Err(mpsc::error::TrySendError::Full(())) => HandOver::Wait(req, conn),
        Err(mpsc::error::TrySendError::Closed(())) => HandOver::Closed,
    }
}

/// Hands a request over once a server slot and room in the core's queue are
/// free; false if the connection or the core ended meanwhile.
///
/// The server's slot is taken only once a request is in hand:
/// `globalOutstandingLimit` counts requests in flight, never connections (as
/// ZooKeeper's does). Taken before reading, it was held by every idle
/// connection, and once as many sessions as the limit were open a new one
/// waited for another's ping. Waiting here holds this connection's slot only,
/// which no other request needs.
async fn hand_over(ctx: Arc<ConnCtx>, outbox: Arc<Outbox>, req: Req, conn: ConnSlot) -> bool {
    let global = tokio::select! {
        g = ctx.global.clone().acquire_owned() => match g {
            Ok(g) => g,
            Err(_) => return false,
        },
        _ = outbox.cancelled() => return false,
    };
    let permit = Permit { conn, global };
    let msg = CoreMsg::Input(Input::Request {
        conn: outbox.conn(),
        req,
        permit,
    });
    tokio::select! {
        r = ctx.core.send(msg) => r.is_ok(),
        _ = outbox.cancelled() => false,
    }
}

/// Reads and decodes frames, holding a buffer only while bytes are in hand (an
/// idle session's memory). A read goes into the thread's scratch space
/// ([`READ_BYTES_MAX`] bytes, so a pipelined client is read in large reads),
/// and what it got is copied into a buffer of exactly that size, or appended to
/// the bytes of a frame not yet complete. A decoded frame keeps its bytes (a
/// slice of that buffer) until it is answered; once every byte read is decoded
/// the reader lets go of the buffer, so an idle connection waits with none. A
/// request costs one small allocation of its own size, not a fixed 1 KiB buffer
/// that a busy allocator must split and merge again (`malloc_consolidate` in
/// write-heavy profiles).
pub(crate) struct FrameReader {
    codec: ServerCodec,
    buf: BytesMut,
}

impl FrameReader {
    fn new(codec: ServerCodec) -> FrameReader {
        FrameReader {
            codec,
            buf: BytesMut::new(),
        }
    }

    /// The next frame; `None` at the end of the stream. After an error the
    /// connection must be closed.
    pub(crate) async fn next<R: AsyncRead + Unpin>(
        &mut self,
        rd: &mut R,
    ) -> Option<Result<Incoming, WireError>> {
        poll_fn(|cx| self.poll_next(rd, cx)).await
    }

    fn poll_next<R: AsyncRead + Unpin>(
        &mut self,
        rd: &mut R,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Incoming, WireError>>> {
        loop {
            if !self.buf.is_empty() {
                let decoded = self.codec.decode(&mut self.buf);
                if self.buf.is_empty() {
                    // Everything read is decoded: the frames hold what they
                    // need of the buffer, the reader holds nothing.
                    self.buf = BytesMut::new();
                }
                match decoded {
                    Ok(None) => {}
                    done => return Poll::Ready(done.transpose()),
                }
            }
            match ready!(self.poll_fill(rd, cx)) {
                // The end of the stream (again, if asked again).
                Ok(0) => return Poll::Ready(self.codec.decode_eof(&mut self.buf).transpose()),
                Ok(_) => {}
                Err(e) => return Poll::Ready(Some(Err(WireError::Io(e)))),
            }
        }
    }

    /// One read, appended to the buffer.
    fn poll_fill<R: AsyncRead + Unpin>(
        &mut self,
        rd: &mut R,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<usize>> {
        READ_SCRATCH.with_borrow_mut(|scratch| {
            let mut read = ReadBuf::new(scratch);
            ready!(Pin::new(rd).poll_read(cx, &mut read))?;
            let got = read.filled();
            if self.buf.is_empty() {
                self.buf = BytesMut::from(got);
            } else {
                self.buf.extend_from_slice(got);
            }
            Poll::Ready(Ok(got.len()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn test_ctx() -> (Arc<ConnCtx>, mpsc::Receiver<CoreMsg>) {
        let (core, rx) = mpsc::channel(16);
        let ctx = ConnCtx {
            core,
            global: Arc::new(Semaphore::new(16)),
            outstanding_max: 4,
            outgoing_bytes_max: 1 << 20,
            frame_bytes_max: 1 << 20,
            sessionless_timeout: Duration::from_secs(10),
            whitelist: FourLetterWhitelist::default(),
        };
        (Arc::new(ctx), rx)
    }

    /// Tokio allocates a task's whole future when it is spawned, for as long as
    /// the connection lives, in steps of 128 bytes (its header, the future, its
    /// trailer): an idle session pays for the largest state of its connection's
    /// future. As `async fn`s (the reader and the writer joined in one task)
    /// the future was 1,104 bytes in this unoptimised build and the task 1,408
    /// in the release build; written by hand it is the same in either build,
    /// and at 160 bytes the task is 256 (with the address and the id in the
    /// task, 224 bytes, it was 384).
    #[tokio::test]
    async fn a_connection_task_stays_small() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (stream, peer) = l.accept().await.unwrap();
        let (ctx, _core) = test_ctx();
        let task = serve(stream, peer, 1, ctx);
        let bytes = std::mem::size_of_val(&task);
        eprintln!(
            "connection {bytes} B, serving {} B, reader {} B, codec {} B, stream {} B",
            std::mem::size_of::<Serving<TcpStream>>(),
            std::mem::size_of::<FrameReader>(),
            std::mem::size_of::<ServerCodec>(),
            std::mem::size_of::<TcpStream>(),
        );
        assert!(bytes <= 160, "a connection's future is {bytes} bytes");
    }

    /// A ConnectRequest frame (protocol 0, no session, 30 s, empty password).
    fn connect_frame() -> Vec<u8> {
        let mut payload = Vec::new();
        payload.extend_from_slice(&0i32.to_be_bytes());
        payload.extend_from_slice(&0i64.to_be_bytes());
        payload.extend_from_slice(&30_000i32.to_be_bytes());
        payload.extend_from_slice(&0i64.to_be_bytes());
        payload.extend_from_slice(&16i32.to_be_bytes());
        payload.extend_from_slice(&[0; 16]);
        let mut frame = (payload.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&payload);
        frame
    }

    /// A ping frame: length 8, xid -2, opcode 11.
    const PING: [u8; 12] = [0, 0, 0, 8, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 11];

    /// Whether the reader holds no allocation (an empty `BytesMut` made
    /// with `new` points nowhere; one split off a read still points into it).
    fn holds_nothing(r: &FrameReader) -> bool {
        r.buf.is_empty() && r.buf.as_ptr() == BytesMut::new().as_ptr()
    }

    /// An idle connection holds no read buffer, and a partial frame is kept
    /// until the rest arrives. Checked by hand: without the reset after a
    /// decode that leaves nothing, the reader keeps pointing into the last
    /// read's allocation and this fails.
    #[tokio::test]
    async fn the_reader_holds_no_buffer_between_requests() {
        use tokio::io::AsyncWriteExt;
        let (mut client, mut server) = tokio::io::duplex(4096);
        let mut reader = FrameReader::new(ServerCodec::new());
        let mut sent = connect_frame();
        sent.extend_from_slice(&PING);
        sent.extend_from_slice(&PING[..6]);
        client.write_all(&sent).await.unwrap();
        assert!(matches!(
            reader.next(&mut server).await,
            Some(Ok(Incoming::Connect(_)))
        ));
        assert!(matches!(
            reader.next(&mut server).await,
            Some(Ok(Incoming::Request(_)))
        ));
        assert_eq!(reader.buf.len(), 6, "half a ping waits for the rest");
        client.write_all(&PING[6..]).await.unwrap();
        assert!(matches!(
            reader.next(&mut server).await,
            Some(Ok(Incoming::Request(_)))
        ));
        assert!(holds_nothing(&reader), "every byte read is decoded");
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(reader.poll_next(&mut server, &mut cx).is_pending());
        assert!(holds_nothing(&reader), "idle");
        drop(client);
        assert!(reader.next(&mut server).await.is_none(), "the end");
    }
}
