//! The server's log: where it goes, in which format, and with or without colour.
//!
//! The log goes to stderr, one event per line, filtered by `RUST_LOG` (default
//! `info`). Two formats:
//! - [`LogFormat::Text`] (default): `tracing`'s human format. Colour codes are
//!   written only when stderr is a terminal and `NO_COLOR` is unset, so a log
//!   redirected to a file, a pipe or journald has no escape sequences in it.
//! - [`LogFormat::Json`] (`--log-format json` or `rzk.log.format=json` in
//!   zoo.cfg): one JSON object per line for log shippers (Filebeat, Vector,
//!   Fluent Bit, Promtail): `timestamp`, `level`, `target`, and `fields` with
//!   `message` and the event's fields (`session`, `zxid`, `peer`, ...). Never
//!   coloured.
//!
//! ```no_run
//! use rzk_server::logging::{self, LogFormat};
//! logging::init("json".parse::<LogFormat>().unwrap()).unwrap();
//! tracing::info!(session = "0x100000001", "session established");
//! ```
//!
//! What is logged at `info`: start and stop, recovery, snapshots, and one line
//! per session opened, closed or expired; nothing per request (requests are
//! `debug`).

use std::fmt;
use std::io::IsTerminal;
use std::str::FromStr;

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines (coloured only on a terminal).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!(
                "unknown log format {other:?}: expected text or json"
            )),
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// Whether text lines get colour codes: only on a terminal, and never when
/// `NO_COLOR` is set to anything but the empty string (<https://no-color.org>).
pub fn use_ansi(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Why the log could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the log: {0}")]
pub struct LogInitError(String);

/// Installs the process-wide log subscriber writing to stderr in `format`,
/// filtered by `RUST_LOG` (default `info`). Fails if one is installed already.
pub fn init(format: LogFormat) -> Result<(), LogInitError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    let result = match format {
        LogFormat::Text => builder
            .with_ansi(use_ansi(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR").as_deref(),
            ))
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_ansi(false)
            .with_current_span(false)
            .try_init(),
    };
    result.map_err(|e| LogInitError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_ansi(true, None));
        assert!(use_ansi(true, Some(OsStr::new(""))));
        assert!(!use_ansi(true, Some(OsStr::new("1"))));
        assert!(!use_ansi(false, None));
        assert!(!use_ansi(false, Some(OsStr::new(""))));
    }

    #[test]
    fn formats_parse_and_print() {
        assert_eq!("json".parse::<LogFormat>().unwrap(), LogFormat::Json);
        assert_eq!(" Text ".parse::<LogFormat>().unwrap(), LogFormat::Text);
        assert!("xml".parse::<LogFormat>().unwrap_err().contains("xml"));
        assert_eq!(LogFormat::Json.to_string(), "json");
    }
}
