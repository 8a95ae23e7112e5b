//! Test support shared by rzk's crates.
//!
//! [`PanicTrap`] fails a test, with the panic's message, when something the test
//! started panics where the test would not otherwise see it: a task of a
//! current-thread tokio runtime (the default of `#[tokio::test]`; tokio catches the
//! task's panic and only its `JoinHandle` would report it), a callback run on such a
//! task (a library may catch and log it), or a helper thread started with
//! [`PanicTrap::spawn`].
//!
//! ```
//! let trap = rzk_testkit::PanicTrap::new();
//! // Something the test does not unwind from: here a panic caught on this thread,
//! // as tokio catches a task's panic.
//! let _ = std::panic::catch_unwind(|| panic!("a check inside a task"));
//! let caught = trap.take();
//! assert_eq!(caught.len(), 1);
//! assert!(caught[0].message.contains("a check inside a task"));
//! // trap.check() (and dropping the trap) would have panicked with that message.
//! ```
//!
//! How: a process-wide panic hook (installed once, chained in front of the hook that
//! was there, so the panic is still printed) records every panic that happens on a
//! thread registered with a live trap. The trap's own thread is registered from
//! [`PanicTrap::new`] until the trap is dropped; a panic that unwinds the test itself
//! is also recorded, but the trap does not report it again (the test fails anyway).
//!
//! What it cannot see: panics on threads it was not told about. The workers of a
//! multi-thread runtime are told about through [`PanicTrap::thread_hook`] (the
//! runtime's `on_thread_start`); otherwise await those tasks' handles and propagate
//! the error.
//!
//! [`ports`] reserves loopback ports for the servers a test starts, so that no
//! other socket takes one between the choice and the server's bind; [`procs`]
//! stops a child process with every one of its threads stopped; [`ensemble`]
//! writes, starts, signals and waits on ensembles of rzk or Apache ZooKeeper
//! processes (the `rzk-ensemble` binary does the same for scripts);
//! [`fourlw`] speaks four-letter words.

pub mod ensemble;
pub mod fourlw;
pub mod ports;
pub mod procs;

use std::collections::HashMap;
use std::panic::{self, PanicHookInfo};
use std::sync::{Arc, Mutex, MutexGuard, Once, OnceLock, PoisonError};
use std::thread::{self, ThreadId};

/// A panic the trap recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaughtPanic {
    /// The name of the thread it happened on (`<unnamed>` if none).
    pub thread: String,
    /// The panic's message.
    pub message: String,
    /// `file:line:column` of the panic.
    pub location: String,
}

impl std::fmt::Display for CaughtPanic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "on thread '{}' at {}: {}",
            self.thread, self.location, self.message
        )
    }
}

type Slot = Arc<Mutex<Vec<CaughtPanic>>>;

/// The threads registered with a live trap, and the records of the traps that watch
/// each (several traps may live on one thread, dropped in any order).
fn registry() -> MutexGuard<'static, HashMap<ThreadId, Vec<Slot>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<ThreadId, Vec<Slot>>>> = OnceLock::new();
    REGISTRY
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

fn lock(slot: &Slot) -> MutexGuard<'_, Vec<CaughtPanic>> {
    slot.lock().unwrap_or_else(PoisonError::into_inner)
}

fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            record(info);
            previous(info);
        }));
    });
}

fn record(info: &PanicHookInfo<'_>) {
    let slots = registry()
        .get(&thread::current().id())
        .cloned()
        .unwrap_or_default();
    if slots.is_empty() {
        return;
    }
    let message = if let Some(s) = info.payload().downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = info.payload().downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic payload that is not a string)".to_owned()
    };
    let caught = CaughtPanic {
        thread: thread::current().name().unwrap_or("<unnamed>").to_owned(),
        message,
        location: info
            .location()
            .map(|l| l.to_string())
            .unwrap_or_else(|| "(unknown location)".to_owned()),
    };
    for slot in &slots {
        lock(slot).push(caught.clone());
    }
}

thread_local! {
    /// The registrations made by [`PanicTrap::thread_hook`], dropped when the thread ends.
    static THREAD_REGISTRATIONS: std::cell::RefCell<Vec<Registration>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Registers a trap's record for the current thread until dropped.
struct Registration {
    thread: ThreadId,
    slot: Slot,
}

impl Registration {
    fn new(slot: &Slot) -> Registration {
        let thread = thread::current().id();
        registry().entry(thread).or_default().push(slot.clone());
        Registration {
            thread,
            slot: slot.clone(),
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut r = registry();
        if let Some(slots) = r.get_mut(&self.thread) {
            slots.retain(|s| !Arc::ptr_eq(s, &self.slot));
            if slots.is_empty() {
                r.remove(&self.thread);
            }
        }
    }
}

/// Fails the test when a task, callback or helper thread of it panicked.
///
/// Create one at the start of a test; [`check`](PanicTrap::check) it (wait loops call
/// [`check_panics`]); dropping it checks as well, so a test that passes with a
/// swallowed panic fails at its end.
#[must_use = "the trap catches panics only while it lives"]
pub struct PanicTrap {
    slot: Slot,
    registration: Option<Registration>,
}

impl Default for PanicTrap {
    fn default() -> Self {
        PanicTrap::new()
    }
}

impl PanicTrap {
    /// Starts recording the panics of the current thread (and of threads started with
    /// [`spawn`](PanicTrap::spawn)) until dropped.
    pub fn new() -> PanicTrap {
        install_hook();
        let slot = Slot::default();
        let registration = Some(Registration::new(&slot));
        PanicTrap { slot, registration }
    }

    /// Panics with the first recorded panic's message, if any was recorded.
    #[track_caller]
    pub fn check(&self) {
        // Copied out first: the panic below is recorded in the same slot.
        let caught = lock(&self.slot).clone();
        fail_if_any(&caught);
    }

    /// Returns and forgets the recorded panics: for a test that provokes a panic on
    /// purpose and checks it itself.
    pub fn take(&self) -> Vec<CaughtPanic> {
        std::mem::take(&mut *lock(&self.slot))
    }

    /// A function that registers the thread calling it with this trap until that
    /// thread ends: give it to a multi-thread tokio runtime's builder as
    /// `on_thread_start`, so panics on the runtime's workers and blocking threads are
    /// recorded (`#[tokio::test(flavor = "multi_thread")]` offers no such hook: build
    /// the runtime by hand).
    pub fn thread_hook(&self) -> impl Fn() + Send + Sync + 'static {
        let slot = self.slot.clone();
        move || {
            THREAD_REGISTRATIONS.with(|r| r.borrow_mut().push(Registration::new(&slot)));
        }
    }

    /// Starts a helper thread named `name` whose panics this trap records.
    pub fn spawn<F, T>(&self, name: &str, f: F) -> thread::JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let slot = self.slot.clone();
        thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let _registration = Registration::new(&slot);
                f()
            })
            .expect("spawn a helper thread")
    }
}

impl Drop for PanicTrap {
    fn drop(&mut self) {
        self.registration.take();
        let caught = self.take();
        if !thread::panicking() {
            fail_if_any(&caught);
            return;
        }
        // The test is failing already; its own panic is the last one recorded.
        // Earlier ones may be the cause: print them.
        if caught.len() > 1 {
            for p in &caught[..caught.len() - 1] {
                eprintln!("note: earlier in this test, a panic {p}");
            }
        }
    }
}

/// Panics if the trap of the current thread recorded a panic: called by wait loops,
/// so a test stops at a task's panic instead of waiting out its deadline. Does
/// nothing on a thread without a trap.
#[track_caller]
pub fn check_panics() {
    let slots = registry()
        .get(&thread::current().id())
        .cloned()
        .unwrap_or_default();
    for slot in &slots {
        let caught = lock(slot).clone();
        fail_if_any(&caught);
    }
}

#[track_caller]
fn fail_if_any(caught: &[CaughtPanic]) {
    if let Some(first) = caught.first() {
        panic!(
            "a task, callback or helper thread of this test panicked ({} panic(s)); the first {first}",
            caught.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn panic_message(r: Result<(), Box<dyn std::any::Any + Send>>) -> String {
        let payload = r.expect_err("it panicked");
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .expect("a string payload")
    }

    #[test]
    fn a_panic_caught_on_the_test_thread_fails_check_with_its_message() {
        let trap = PanicTrap::new();
        let _ = panic::catch_unwind(|| panic!("inside a task: {}", 42));
        let m = panic_message(panic::catch_unwind(panic::AssertUnwindSafe(|| {
            trap.check()
        })));
        assert!(m.contains("inside a task: 42"), "{m}");
        assert!(m.contains("lib.rs"), "the location is given: {m}");
        trap.take();
    }

    #[test]
    fn check_panics_sees_the_trap_of_the_current_thread() {
        let trap = PanicTrap::new();
        check_panics();
        let _ = panic::catch_unwind(|| panic!("from a callback"));
        let m = panic_message(panic::catch_unwind(check_panics));
        assert!(m.contains("from a callback"), "{m}");
        trap.take();
    }

    #[test]
    fn a_helper_thread_panic_is_recorded_even_if_never_joined() {
        let trap = PanicTrap::new();
        let h = trap.spawn("helper", || panic!("helper failed"));
        // Joining only waits here; the trap does not depend on it.
        let _ = h.join();
        let caught = trap.take();
        assert_eq!(caught.len(), 1, "{caught:?}");
        assert_eq!(caught[0].thread, "helper");
        assert_eq!(caught[0].message, "helper failed");
    }

    #[test]
    fn a_thread_registered_by_the_hook_is_recorded_until_it_ends() {
        let trap = PanicTrap::new();
        let hook = trap.thread_hook();
        // As a runtime's worker: the hook runs first on the new thread.
        let worker = thread::Builder::new()
            .name("worker".to_owned())
            .spawn(move || {
                hook();
                let _ = panic::catch_unwind(|| panic!("inside a worker's task"));
            })
            .expect("spawn");
        let worker_id = worker.thread().id();
        worker.join().expect("the worker caught its task's panic");
        let caught = trap.take();
        assert_eq!(caught.len(), 1, "{caught:?}");
        assert_eq!(caught[0].thread, "worker");
        assert_eq!(caught[0].message, "inside a worker's task");
        assert!(
            !registry().contains_key(&worker_id),
            "the worker's registration ends with it"
        );
    }

    #[test]
    fn threads_it_was_not_told_about_are_not_recorded() {
        let trap = PanicTrap::new();
        let _ = thread::spawn(|| panic!("someone else's")).join();
        assert!(trap.take().is_empty());
    }

    #[test]
    fn dropping_a_trap_with_a_recorded_panic_fails() {
        let m = panic_message(panic::catch_unwind(|| {
            let _trap = PanicTrap::new();
            let _ = panic::catch_unwind(|| panic!("swallowed"));
        }));
        assert!(m.contains("swallowed"), "{m}");
    }

    #[test]
    fn two_traps_on_one_thread_both_record_and_drop_in_any_order() {
        let first = PanicTrap::new();
        let second = PanicTrap::new();
        let _ = panic::catch_unwind(|| panic!("seen by both"));
        assert_eq!(first.take().len(), 1);
        drop(first);
        let _ = panic::catch_unwind(|| panic!("seen by the second"));
        let caught = second.take();
        assert_eq!(caught.len(), 2, "{caught:?}");
        drop(second);
        check_panics();
    }

    #[test]
    fn a_dropped_trap_stops_recording() {
        let trap = PanicTrap::new();
        drop(trap);
        let _ = panic::catch_unwind(|| panic!("after the trap"));
        check_panics();
    }
}
