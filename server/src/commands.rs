//! The operations commands in one table: the four-letter words a client sends
//! on the client port and the AdminServer's commands, with the facts every
//! surface needs about each (its AdminServer name and short name, whether its
//! answer needs the snapshot's [`Details`](crate::stats::Details), whether
//! `4lw.commands.whitelist` may name it and whether ZooKeeper's default
//! whitelist does).
//!
//! [`of_word`] is an exhaustive `match` on [`FourLetterWord`], so a word the
//! wire crate learns to decode does not compile here until it has a row; the
//! wire crate decodes only the words in [`FourLetterWord::ALL`], so every
//! word that can arrive has one. [`ADMIN_ONLY`] holds the AdminServer's
//! commands that have no four-letter word. The whitelist names
//! (`crate::config`), the AdminServer's names, aliases and index
//! (`crate::admin`) and the four-letter words' snapshots (`crate::fourlw`) are
//! all read from here.

use rzk_wire::FourLetterWord as W;

/// Which answers of a command read the snapshot's details (the parts that
/// grow with the data, and the sizes of the data directories, which cost a
/// walk of the disk).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Details {
    /// Neither answer.
    Never,
    /// Only the AdminServer's: its `server_stats` and `stats` carry the
    /// directory sizes, the four-letter `srvr` and `stat` do not (and `srvr`
    /// is what health checks poll, so it stays off the disk).
    AdminOnly,
    /// Both answers.
    Always,
}

/// What `4lw.commands.whitelist` may say about a four-letter word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Whitelist {
    /// Answered unless the whitelist leaves it out: ZooKeeper's default
    /// whitelist, `srvr` alone since 3.5.3.
    Default,
    /// Answered when the whitelist names it (or is `*`).
    Named,
    /// Not a name the whitelist can hold: telnet's close sequence, which
    /// ZooKeeper lists among its words only to close quietly.
    Never,
}

/// An AdminServer command's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Admin {
    /// Its name (`GET /commands/<name>`), as ZooKeeper 3.8 names it.
    pub name: &'static str,
    /// ZooKeeper's short name for it, when the command has no four-letter
    /// word on the client port (`lead` for `leader`); a command with a word
    /// answers to the word instead.
    pub short: Option<&'static str>,
}

/// One operations command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Command {
    /// The four-letter word that runs it on the client port, if any.
    pub word: Option<W>,
    /// Its names on the AdminServer, if the AdminServer serves it.
    pub admin: Option<Admin>,
    /// Which answers need the snapshot's details.
    pub details: Details,
    /// What the whitelist may say about its word ([`Whitelist::Never`] for
    /// an AdminServer command with no word: the whitelist governs the
    /// client port only).
    pub whitelist: Whitelist,
}

impl Command {
    /// A four-letter word the AdminServer also serves as `admin`.
    const fn word(word: W, admin: &'static str) -> Command {
        Command {
            word: Some(word),
            admin: Some(Admin {
                name: admin,
                short: None,
            }),
            details: Details::Never,
            whitelist: Whitelist::Named,
        }
    }

    /// An AdminServer command with no four-letter word, and its short name.
    const fn admin(name: &'static str, short: Option<&'static str>) -> Command {
        Command {
            word: None,
            admin: Some(Admin { name, short }),
            details: Details::Never,
            whitelist: Whitelist::Never,
        }
    }

    /// A four-letter word the AdminServer does not serve.
    const fn client_port_only(word: W, whitelist: Whitelist) -> Command {
        Command {
            word: Some(word),
            admin: None,
            details: Details::Never,
            whitelist,
        }
    }

    const fn details(self, details: Details) -> Command {
        Command { details, ..self }
    }

    const fn whitelist(self, whitelist: Whitelist) -> Command {
        Command { whitelist, ..self }
    }

    /// Whether the four-letter word's answer reads the details.
    pub(crate) fn word_needs_details(&self) -> bool {
        self.details == Details::Always
    }

    /// Whether the AdminServer's answer reads the details.
    pub(crate) fn admin_needs_details(&self) -> bool {
        self.details != Details::Never
    }

    /// Whether the AdminServer answers `GET /commands/<requested>` with
    /// this command: its name, its short name or its four-letter word.
    fn admin_answers_to(&self, requested: &str) -> bool {
        let Some(admin) = self.admin else {
            return false;
        };
        admin.name == requested
            || admin.short == Some(requested)
            || self.word.is_some_and(|w| w.name() == requested)
    }
}

/// The row of a four-letter word.
pub(crate) const fn of_word(word: W) -> Command {
    match word {
        W::Conf => Command::word(W::Conf, "configuration").details(Details::Always),
        W::Cons => Command::word(W::Cons, "connections"),
        W::Crst => Command::word(W::Crst, "connection_stat_reset"),
        W::Dirs => Command::word(W::Dirs, "dirs").details(Details::Always),
        W::Dump => Command::word(W::Dump, "dump").details(Details::Always),
        W::Envi => Command::word(W::Envi, "environment"),
        W::Gtmk => Command::word(W::Gtmk, "get_trace_mask"),
        W::Hash => Command::word(W::Hash, "hash"),
        W::Isro => Command::word(W::Isro, "is_read_only"),
        W::Mntr => Command::word(W::Mntr, "monitor"),
        W::Ruok => Command::word(W::Ruok, "ruok"),
        W::Srst => Command::word(W::Srst, "stat_reset"),
        W::Srvr => Command::word(W::Srvr, "server_stats")
            .details(Details::AdminOnly)
            .whitelist(Whitelist::Default),
        W::Stat => Command::word(W::Stat, "stats").details(Details::AdminOnly),
        // ZooKeeper's AdminServer has `set_trace_mask`; rzk has no trace mask
        // to set, so only the word (which answers the default mask) is served.
        W::Stmk { .. } => Command::client_port_only(word, Whitelist::Named),
        W::Wchc => Command::word(W::Wchc, "watches").details(Details::Always),
        W::Wchp => Command::word(W::Wchp, "watches_by_path").details(Details::Always),
        W::Wchs => Command::word(W::Wchs, "watch_summary"),
        W::TelnetClose => Command::client_port_only(W::TelnetClose, Whitelist::Never),
    }
}

/// The AdminServer's commands that have no four-letter word.
pub(crate) const ADMIN_ONLY: [Command; 7] = [
    Command::admin("initial_configuration", Some("icfg")),
    Command::admin("last_snapshot", Some("lsnp")),
    Command::admin("leader", Some("lead")),
    Command::admin("observer_connection_stat_reset", Some("orst")),
    Command::admin("observers", Some("obsr")),
    Command::admin("voting_view", None),
    Command::admin("zabstate", None),
];

/// Every command: the four-letter words, then the AdminServer-only ones.
pub(crate) fn all() -> impl Iterator<Item = Command> {
    W::ALL.into_iter().map(of_word).chain(ADMIN_ONLY)
}

/// The AdminServer's command that `requested` names (its name, short name or
/// four-letter word).
pub(crate) fn admin_command(requested: &str) -> Option<(Admin, Command)> {
    all()
        .find(|c| c.admin_answers_to(requested))
        .and_then(|c| Some((c.admin?, c)))
}

/// The AdminServer's command names, sorted (its index page).
pub(crate) fn admin_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = all().filter_map(|c| Some(c.admin?.name)).collect();
    names.sort_unstable();
    names
}

/// Whether `name` is a four-letter word `4lw.commands.whitelist` may hold.
pub(crate) fn whitelistable(name: &str) -> bool {
    W::ALL
        .into_iter()
        .any(|w| w.name() == name && of_word(w).whitelist != Whitelist::Never)
}

/// ZooKeeper's default whitelist: the words answered when
/// `4lw.commands.whitelist` is not set.
pub(crate) fn default_whitelist() -> impl Iterator<Item = &'static str> {
    W::ALL
        .into_iter()
        .filter(|w| of_word(*w).whitelist == Whitelist::Default)
        .map(W::name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_words_row_is_its_own() {
        for w in W::ALL {
            assert_eq!(of_word(w).word.map(W::name), Some(w.name()), "{w:?}");
        }
        for c in ADMIN_ONLY {
            assert_eq!(c.word, None, "{c:?}");
            assert_eq!(c.whitelist, Whitelist::Never, "{c:?}");
        }
    }

    #[test]
    fn admin_names_and_aliases_are_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for c in all() {
            let Some(admin) = c.admin else { continue };
            // A word named like its command (`dirs`) is one name.
            let names: std::collections::BTreeSet<&str> =
                [Some(admin.name), admin.short, c.word.map(W::name)]
                    .into_iter()
                    .flatten()
                    .collect();
            for n in names {
                assert!(seen.insert(n), "{n} names two commands");
            }
        }
        assert_eq!(admin_command("mntr").map(|(a, _)| a.name), Some("monitor"));
        assert_eq!(admin_command("lead").map(|(a, _)| a.name), Some("leader"));
        assert_eq!(admin_command("dirs").map(|(a, _)| a.name), Some("dirs"));
        assert_eq!(admin_command("stmk"), None);
    }

    #[test]
    fn the_default_whitelist_is_srvr_alone_as_in_zookeeper() {
        assert_eq!(default_whitelist().collect::<Vec<_>>(), ["srvr"]);
        assert!(whitelistable("mntr") && whitelistable("hash") && whitelistable("stmk"));
        assert!(!whitelistable("telnet close") && !whitelistable("lead"));
    }
}
