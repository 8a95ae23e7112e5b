//! Four-letter words (docs/client-protocol.md, "Four-letter words"): a bare
//! 4-byte ASCII command sent as the very first bytes of a connection instead of
//! a ConnectRequest's length prefix.

use bytes::{BufMut, BytesMut};

/// A four-letter command, as ZooKeeper 3.8 knows them (`FourLetterCommands`).
///
/// Recognised only at the start of a fresh connection. Whether a command is
/// whitelisted, and its output, are the server's business; output is raw text
/// with no framing, and the server closes the connection after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FourLetterWord {
    /// `conf`: configuration.
    Conf,
    /// `cons`: connection details.
    Cons,
    /// `crst`: reset connection statistics.
    Crst,
    /// `dirs`: data and log directory sizes.
    Dirs,
    /// `dump`: sessions and ephemerals.
    Dump,
    /// `envi`: environment.
    Envi,
    /// `gtmk`: the trace mask.
    Gtmk,
    /// `hash`: digest history.
    Hash,
    /// `isro`: `rw` or `ro`.
    Isro,
    /// `mntr`: metrics.
    Mntr,
    /// `ruok`: `imok`.
    Ruok,
    /// `srst`: reset server statistics.
    Srst,
    /// `srvr`: server summary.
    Srvr,
    /// `stat`: summary plus clients.
    Stat,
    /// `stmk` and the 8-byte trace mask that follows it.
    Stmk {
        /// The new trace mask.
        trace_mask: i64,
    },
    /// `wchc`: watches by session.
    Wchc,
    /// `wchp`: watches by path.
    Wchp,
    /// `wchs`: watch summary.
    Wchs,
    /// The bytes `ff f4 ff fd` telnet sends when it closes; ZooKeeper lists it
    /// so that it closes the connection quietly.
    TelnetClose,
}

impl FourLetterWord {
    /// Every word, as ZooKeeper 3.8 lists them (`stmk` with a mask of 0).
    pub const ALL: [FourLetterWord; 19] = [
        FourLetterWord::Conf,
        FourLetterWord::Cons,
        FourLetterWord::Crst,
        FourLetterWord::Dirs,
        FourLetterWord::Dump,
        FourLetterWord::Envi,
        FourLetterWord::Gtmk,
        FourLetterWord::Hash,
        FourLetterWord::Isro,
        FourLetterWord::Mntr,
        FourLetterWord::Ruok,
        FourLetterWord::Srst,
        FourLetterWord::Srvr,
        FourLetterWord::Stat,
        FourLetterWord::Stmk { trace_mask: 0 },
        FourLetterWord::Wchc,
        FourLetterWord::Wchp,
        FourLetterWord::Wchs,
        FourLetterWord::TelnetClose,
    ];

    /// The four bytes on the wire.
    pub const fn code(self) -> [u8; 4] {
        match self {
            FourLetterWord::Conf => *b"conf",
            FourLetterWord::Cons => *b"cons",
            FourLetterWord::Crst => *b"crst",
            FourLetterWord::Dirs => *b"dirs",
            FourLetterWord::Dump => *b"dump",
            FourLetterWord::Envi => *b"envi",
            FourLetterWord::Gtmk => *b"gtmk",
            FourLetterWord::Hash => *b"hash",
            FourLetterWord::Isro => *b"isro",
            FourLetterWord::Mntr => *b"mntr",
            FourLetterWord::Ruok => *b"ruok",
            FourLetterWord::Srst => *b"srst",
            FourLetterWord::Srvr => *b"srvr",
            FourLetterWord::Stat => *b"stat",
            FourLetterWord::Stmk { .. } => *b"stmk",
            FourLetterWord::Wchc => *b"wchc",
            FourLetterWord::Wchp => *b"wchp",
            FourLetterWord::Wchs => *b"wchs",
            FourLetterWord::TelnetClose => [0xff, 0xf4, 0xff, 0xfd],
        }
    }

    /// The command's name as ZooKeeper's whitelist spells it (`"ruok"`, ...;
    /// `"telnet close"` for [`FourLetterWord::TelnetClose`]).
    pub const fn name(self) -> &'static str {
        match self {
            FourLetterWord::Conf => "conf",
            FourLetterWord::Cons => "cons",
            FourLetterWord::Crst => "crst",
            FourLetterWord::Dirs => "dirs",
            FourLetterWord::Dump => "dump",
            FourLetterWord::Envi => "envi",
            FourLetterWord::Gtmk => "gtmk",
            FourLetterWord::Hash => "hash",
            FourLetterWord::Isro => "isro",
            FourLetterWord::Mntr => "mntr",
            FourLetterWord::Ruok => "ruok",
            FourLetterWord::Srst => "srst",
            FourLetterWord::Srvr => "srvr",
            FourLetterWord::Stat => "stat",
            FourLetterWord::Stmk { .. } => "stmk",
            FourLetterWord::Wchc => "wchc",
            FourLetterWord::Wchp => "wchp",
            FourLetterWord::Wchs => "wchs",
            FourLetterWord::TelnetClose => "telnet close",
        }
    }

    /// Appends the command as a client sends it (4 bytes, plus the mask for
    /// `stmk`).
    pub fn encode(self, dst: &mut BytesMut) {
        dst.put_slice(&self.code());
        if let FourLetterWord::Stmk { trace_mask } = self {
            dst.put_i64(trace_mask);
        }
    }

    /// The word these 4 bytes name, with `stmk`'s mask still to be read.
    /// Only the words in [`FourLetterWord::ALL`] are decoded, so a list
    /// kept from it (the server's table of commands) covers every word that
    /// can arrive.
    fn from_code(code: [u8; 4]) -> Option<FourLetterWord> {
        FourLetterWord::ALL.into_iter().find(|w| w.code() == code)
    }
}

/// What the first bytes of a connection say about a four-letter word.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Recognised {
    /// Not a known word: read the bytes as a frame length.
    No,
    /// A known word that needs more bytes (`stmk` and its mask).
    NeedMore,
    /// A word, and how many bytes it took.
    Word(FourLetterWord, usize),
}

/// Looks at the first bytes of a fresh connection (at least 4 must be there).
pub(crate) fn recognise(src: &[u8]) -> Recognised {
    let Some(code) = src.first_chunk::<4>() else {
        return Recognised::NeedMore;
    };
    let Some(word) = FourLetterWord::from_code(*code) else {
        return Recognised::No;
    };
    let FourLetterWord::Stmk { .. } = word else {
        return Recognised::Word(word, 4);
    };
    match src.get(4..12) {
        None => Recognised::NeedMore,
        Some(mask) => {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(mask);
            Recognised::Word(
                FourLetterWord::Stmk {
                    trace_mask: i64::from_be_bytes(bytes),
                },
                12,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_is_recognised_from_its_encoding() {
        // `stmk` with a mask that is not 0, to see the mask read back.
        let with_masks = FourLetterWord::ALL.map(|w| {
            if let FourLetterWord::Stmk { .. } = w {
                FourLetterWord::Stmk { trace_mask: 306 }
            } else {
                w
            }
        });
        for word in with_masks {
            let mut dst = BytesMut::new();
            word.encode(&mut dst);
            assert_eq!(
                recognise(&dst),
                Recognised::Word(word, dst.len()),
                "{word:?}"
            );
        }
    }

    #[test]
    fn ruok_is_the_int_zookeeper_compares() {
        assert_eq!(i32::from_be_bytes(FourLetterWord::Ruok.code()), 0x72756f6b);
    }

    #[test]
    fn words_have_distinct_codes_and_names() {
        let codes: std::collections::HashSet<[u8; 4]> =
            FourLetterWord::ALL.iter().map(|w| w.code()).collect();
        let names: std::collections::HashSet<&str> =
            FourLetterWord::ALL.iter().map(|w| w.name()).collect();
        assert_eq!(codes.len(), FourLetterWord::ALL.len());
        assert_eq!(names.len(), FourLetterWord::ALL.len());
    }

    #[test]
    fn stmk_waits_for_its_mask_and_unknown_words_are_lengths() {
        assert_eq!(recognise(b"stmk\0\0\0"), Recognised::NeedMore);
        assert_eq!(recognise(b"xxxx"), Recognised::No);
    }
}
