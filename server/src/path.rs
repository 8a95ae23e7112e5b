//! ZooKeeper's path rules (docs/client-protocol.md, "Paths").

/// Whether `path` is a valid znode path by ZooKeeper's rules: starts with `/`,
/// no trailing `/` (except the root), no empty component, no `.` or `..`
/// component, no NUL and none of the characters ZooKeeper refuses
/// (U+0001–U+001F, U+007F–U+009F, U+D800–U+F8FF, U+FFF0–U+FFFF). A character
/// outside the Basic Multilingual Plane is refused too: Java sees it as a
/// surrogate pair, which falls in U+D800–U+DFFF.
pub fn is_valid(path: &str) -> bool {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return false;
    }
    if path.len() == 1 {
        return true;
    }
    if bytes[bytes.len() - 1] == b'/' {
        return false;
    }
    for component in path[1..].split('/') {
        if component.is_empty() || component == "." || component == ".." {
            return false;
        }
    }
    path.chars().all(|c| {
        let c = c as u32;
        !(c == 0
            || (0x01..=0x1f).contains(&c)
            || (0x7f..=0x9f).contains(&c)
            || (0xd800..=0xf8ff).contains(&c)
            || (0xfff0..=0xffff).contains(&c)
            || c > 0xffff)
    })
}

/// The parent of `path`: everything before the last `/` (`/` for a top-level
/// node). `None` if the path has no `/` at all.
pub fn parent(path: &str) -> Option<&str> {
    let at = path.rfind('/')?;
    Some(if at == 0 { "/" } else { &path[..at] })
}

/// The last component of `path` (after the last `/`).
pub fn name(path: &str) -> &str {
    match path.rfind('/') {
        Some(at) => &path[at + 1..],
        None => path,
    }
}

/// `parent` + `/` + `name`, without doubling the root's slash.
pub fn join(parent: &str, name: &str) -> String {
    let mut p = String::with_capacity(parent.len() + 1 + name.len());
    p.push_str(parent);
    if parent != "/" {
        p.push('/');
    }
    p.push_str(name);
    p
}

/// Whether `path` is `ancestor` or below it.
pub fn is_at_or_below(path: &str, ancestor: &str) -> bool {
    if ancestor == "/" {
        return path.starts_with('/');
    }
    path == ancestor
        || (path.starts_with(ancestor) && path.as_bytes().get(ancestor.len()) == Some(&b'/'))
}

/// The nodes ZooKeeper never lets a client delete (docs/client-protocol.md,
/// "delete").
pub fn is_protected(path: &str) -> bool {
    matches!(
        path,
        "/" | "/zookeeper" | "/zookeeper/quota" | "/zookeeper/config"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zookeeper_path_rules() {
        for ok in ["/", "/a", "/a/b", "/a.b", "/...", "/a/.b", "/é", "/a b"] {
            assert!(is_valid(ok), "{ok}");
        }
        for bad in [
            "",
            "a",
            "/a/",
            "//",
            "/a//b",
            "/.",
            "/..",
            "/a/.",
            "/a/../b",
            "/a\0b",
            "/a\u{1}",
            "/\u{7f}",
            "/\u{e000}",
            "/\u{fff5}",
            "/\u{1f600}",
        ] {
            assert!(!is_valid(bad), "{bad:?}");
        }
    }

    #[test]
    fn parents_and_names() {
        assert_eq!(parent("/a"), Some("/"));
        assert_eq!(parent("/a/b"), Some("/a"));
        assert_eq!(parent("/missing/"), Some("/missing"));
        assert_eq!(parent("noslash"), None);
        assert_eq!(name("/a/b"), "b");
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
        assert!(is_at_or_below("/a/b", "/a"));
        assert!(!is_at_or_below("/ab", "/a"));
        assert!(is_at_or_below("/a", "/"));
    }
}
