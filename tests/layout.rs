//! The code layout's promises (lib.rs, docs/development.md "Code layout"): every import
//! goes down lib.rs's floors, and no circle of imports at any level — at the top,
//! between the library's modules (a file or folder under `src/`, `cli/` included);
//! inside every folder, between its rooms (each file, each sub-folder as one, `mod.rs`
//! as its own). Read with `syn` from the whole of every file except its `#[cfg(test)]`
//! items (tests may reach anywhere): every `use`, every path through `crate::`,
//! `super::` or `self::`, through a name the file `use`d or a child module
//! (`standby::alternate(…)`), in code or in a macro's arguments, resolved through the
//! `use` items of the module it names (`super::Position` from `source/archive.rs` is
//! `crate::position`), is an arrow from its file to the file that defines what it
//! names. A folder's `pub use` hands its children's names on and is no arrow itself.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// A module's path from the crate root: `["source", "reader", "events"]`.
type ModPath = Vec<String>;

/// One file of the library, read.
struct File {
    /// Absolute paths it names (`use` trees expanded, `super` and `self` resolved).
    named: Vec<ModPath>,
    /// Paths in its code that start with a plain name (`standby::alternate(…)`,
    /// `sink::ensure(…)`): a child module's or a `use`d name's, resolved once every
    /// file is known.
    relative: Vec<Vec<String>>,
    /// Name → absolute path, from its `use` items (what `super::Name` reaches).
    uses: BTreeMap<String, ModPath>,
}

/// Every library file by module path (main.rs, `cli`'s thin caller, is not the
/// library).
fn library() -> BTreeMap<ModPath, File> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    collect(&src, &mut paths);
    let mut files = BTreeMap::new();
    for path in paths {
        let rel = path.strip_prefix(&src).unwrap();
        let mut module: ModPath = rel
            .with_extension("")
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let is_folder = matches!(module.last().map(String::as_str), Some("mod" | "lib"));
        if is_folder {
            module.pop();
        }
        if module.first().is_some_and(|m| m == "main") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let syntax = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut reader = Reader {
            module: module.clone(),
            is_folder,
            file: File {
                named: Vec::new(),
                relative: Vec::new(),
                uses: BTreeMap::new(),
            },
        };
        reader.visit_file(&syntax);
        files.insert(module, reader.file);
    }
    files
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for e in std::fs::read_dir(path).unwrap().flatten() {
            collect(&e.path(), out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

struct Reader {
    module: ModPath,
    /// A folder's `mod.rs` (or the crate root).
    is_folder: bool,
    file: File,
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

impl Reader {
    /// `segments` as an absolute path, when it starts at `crate`, `super` or `self`.
    fn absolute(&self, segments: &[String]) -> Option<ModPath> {
        let mut at = self.module.clone();
        let mut rest = segments;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                at.clear();
                rest = &rest[1..];
            }
            Some("super") | Some("self") => {
                while let Some(first) = rest.first() {
                    match first.as_str() {
                        "super" => {
                            at.pop()?;
                        }
                        "self" => {}
                        _ => break,
                    }
                    rest = &rest[1..];
                }
            }
            _ => return None,
        }
        at.extend(rest.iter().cloned());
        Some(at)
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.used(prefix, &n.ident.to_string(), None),
            syn::UseTree::Rename(r) => {
                self.used(prefix, &r.ident.to_string(), Some(r.rename.to_string()))
            }
            syn::UseTree::Glob(_) => self.used(prefix, "*", None),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    fn used(&mut self, prefix: &[String], name: &str, rename: Option<String>) {
        let mut segments = prefix.to_vec();
        if name != "self" && name != "*" {
            segments.push(name.to_string());
        }
        // `use x::{self}` names module x; `use x::*` everything x has.
        let local = rename.unwrap_or_else(|| match name {
            "self" => prefix.last().cloned().unwrap_or_default(),
            _ => name.to_string(),
        });
        // A relative first segment (`use archive::Archive` in mod.rs) is a child.
        let absolute = self.absolute(&segments).or_else(|| {
            let first = segments.first()?;
            let std_like = ["std", "core", "alloc"].contains(&first.as_str());
            (!std_like && first.chars().all(|c| c.is_ascii_lowercase() || c == '_')).then(|| {
                let mut path = self.module.clone();
                path.extend(segments.iter().cloned());
                path
            })
        });
        if let Some(path) = absolute {
            if local != "*" && local != "_" {
                self.file.uses.insert(local, path.clone());
            }
            self.file.named.push(path);
        }
    }
}

impl<'ast> Visit<'ast> for Reader {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            syn::Item::Macro(m) => &m.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if !is_test(attrs) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        // A folder's `pub use` hands its children's names on (its face): no arrow of
        // its own, but what a child's `super::Name` reaches through.
        let face = self.is_folder && matches!(item.vis, syn::Visibility::Public(_));
        let named = self.file.named.len();
        self.use_tree(&mut Vec::new(), &item.tree);
        if face {
            self.file.named.truncate(named);
        }
    }

    // `bail!("{}", super::x(…))`, `format!`, `assert!`: a macro whose arguments are
    // expressions is read as them (`matches!` and friends that are not stay unread).
    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        use syn::punctuated::Punctuated;
        let parser = Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated;
        if let Ok(args) = mac.parse_body_with(parser) {
            for arg in &args {
                self.visit_expr(arg);
            }
        }
        syn::visit::visit_macro(self, mac);
    }

    // `pub(super)` / `pub(in crate::x)` say who may see an item, not what it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        match self.absolute(&segments) {
            Some(absolute) => self.file.named.push(absolute),
            None if segments.len() > 1 => self.file.relative.push(segments),
            None => {}
        }
        syn::visit::visit_path(self, path);
    }
}

/// The file that defines what `path` names: the longest prefix that is a module, then
/// through that module's `use` items (a re-export, or a name it imported for its
/// children), a few steps at most.
fn defining(files: &BTreeMap<ModPath, File>, path: &[String]) -> Option<ModPath> {
    let mut path = path.to_vec();
    for _ in 0..4 {
        let module = (0..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|p| files.contains_key(p))?;
        let Some(next) = path
            .get(module.len())
            .and_then(|name| files[&module].uses.get(name))
        else {
            return Some(module);
        };
        let mut followed = next.clone();
        followed.extend(path[module.len() + 1..].iter().cloned());
        if followed == path {
            return Some(module);
        }
        path = followed;
    }
    Some(path)
}

/// File → the files it imports from.
fn file_graph() -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let files = library();
    files
        .iter()
        .map(|(module, file)| {
            let relative = file.relative.iter().filter_map(|segments| {
                // Through a name the file `use`d, or a child module of this one.
                let (first, rest) = segments.split_first()?;
                let mut path = match file.uses.get(first) {
                    Some(used) => used.clone(),
                    None => {
                        let mut child = module.clone();
                        child.push(first.clone());
                        files.contains_key(&child).then_some(child)?
                    }
                };
                path.extend(rest.iter().cloned());
                Some(path)
            });
            let targets = file
                .named
                .iter()
                .cloned()
                .chain(relative)
                .filter_map(|p| defining(&files, &p))
                .filter(|t| t != module)
                .collect();
            (module.clone(), targets)
        })
        .collect()
}

/// The graph one level inside `folder`: its rooms (a child file or sub-folder by name;
/// the folder's own `mod.rs` as `mod.rs`) and the imports between them.
fn level(
    graph: &BTreeMap<ModPath, BTreeSet<ModPath>>,
    folder: &[String],
) -> BTreeMap<String, BTreeSet<String>> {
    let room = |m: &ModPath| -> Option<String> {
        if !m.starts_with(folder) {
            return None;
        }
        Some(
            m.get(folder.len())
                .cloned()
                .unwrap_or_else(|| "mod.rs".into()),
        )
    };
    let mut rooms: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, targets) in graph {
        let Some(a) = room(from) else { continue };
        let edges = rooms.entry(a.clone()).or_default();
        for b in targets.iter().filter_map(room) {
            // The crate root's own file (lib.rs) only declares the modules.
            if b != a && !(folder.is_empty() && (a == "mod.rs" || b == "mod.rs")) {
                edges.insert(b);
            }
        }
    }
    rooms
}

/// A path from `from` back to itself, if there is one.
fn cycle_through(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![(from.to_string(), vec![from.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for next in graph.get(&at).into_iter().flatten() {
            if next == from {
                let mut cycle = path.clone();
                cycle.push(from.to_string());
                return Some(cycle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

fn circles(rooms: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    rooms
        .keys()
        .filter_map(|m| cycle_through(rooms, m))
        .map(|c| c.join(" → "))
        .collect()
}

/// Every folder of the library (the crate root included).
fn folders(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> BTreeSet<ModPath> {
    graph
        .keys()
        .flat_map(|m| (0..m.len()).map(|n| m[..n].to_vec()))
        .collect()
}

#[test]
fn no_circle_of_imports_at_any_level() {
    let graph = file_graph();
    assert!(graph.len() > 100, "found only {} files", graph.len());
    let folders = folders(&graph);
    assert!(folders.len() > 12, "found only {folders:?}");
    let mut found = Vec::new();
    for folder in &folders {
        for circle in circles(&level(&graph, folder)) {
            found.push(format!("in src/{}: {circle}", folder.join("/")));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn the_check_sees_what_it_must() {
    let mut graph = file_graph();
    // Code after a test module is read (it used to stop at the first `#[cfg(test)]`).
    let config = &graph[&vec!["config".to_string()]];
    assert!(
        config.contains(&vec!["source".to_string(), "config".to_string()]),
        "{config:?}"
    );
    // `super::` through the parent's `use` reaches the defining file.
    let archive = &graph[&vec!["source".to_string(), "archive".to_string()]];
    assert!(
        archive.contains(&vec!["position".to_string(), "binlog".to_string()]),
        "{archive:?}"
    );
    // A circle planted inside a folder, and one between top-level modules, are seen.
    let reader = vec![
        "source".to_string(),
        "reader".to_string(),
        "events".to_string(),
    ];
    let archive = vec!["source".to_string(), "archive".to_string()];
    graph.get_mut(&archive).unwrap().insert(reader);
    assert!(!circles(&level(&graph, &["source".to_string()])).is_empty());
    graph
        .get_mut(&vec!["source".to_string(), "row".to_string()])
        .unwrap()
        .insert(vec!["pipeline".to_string()]);
    assert!(!circles(&level(&graph, &[])).is_empty());
}

/// lib.rs's floors, lowest first: `floor N: a b c` lines of its map.
fn floors() -> Vec<BTreeSet<String>> {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let mut floors: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for line in lib.lines() {
        let Some(rest) = line.strip_prefix("//! floor ") else {
            continue;
        };
        let (n, names) = rest.split_once(':').expect("floor N: names");
        let n: usize = n.trim().parse().expect("a floor's number");
        let names = names.split_whitespace().map(str::to_string).collect();
        assert!(floors.insert(n, names).is_none(), "floor {n} twice");
    }
    assert!(
        floors.keys().copied().eq(0..floors.len()),
        "floors numbered 0, 1, 2, …: {floors:?}"
    );
    floors.into_values().collect()
}

/// Every arrow between top-level modules that does not go down a floor.
fn against_the_floors(
    top: &BTreeMap<String, BTreeSet<String>>,
    floors: &[BTreeSet<String>],
) -> Vec<String> {
    let floor_of = |m: &str| floors.iter().position(|f| f.contains(m));
    let mut found = Vec::new();
    // The crate root (`mod.rs` here) only declares the modules.
    for (from, targets) in top.iter().filter(|(m, _)| *m != "mod.rs") {
        let Some(a) = floor_of(from) else {
            found.push(format!("{from} is on no floor of lib.rs"));
            continue;
        };
        for to in targets {
            match floor_of(to) {
                Some(b) if b < a => {}
                Some(b) => found.push(format!("{from} (floor {a}) imports {to} (floor {b})")),
                None => found.push(format!("{to} is on no floor of lib.rs")),
            }
        }
    }
    found
}

#[test]
fn every_import_goes_down_a_floor() {
    let graph = file_graph();
    let floors = floors();
    // The house's height: nine floors for the library, main.rs the tenth.
    assert!(floors.len() <= 9, "{} floors: {floors:?}", floors.len());
    let top = level(&graph, &[]);
    let on_floors: BTreeSet<&String> = floors.iter().flatten().collect();
    let modules: BTreeSet<&String> = top.keys().filter(|m| *m != "mod.rs").collect();
    assert_eq!(on_floors, modules, "lib.rs's floors name every module once");
    let found = against_the_floors(&top, &floors);
    assert!(
        found.is_empty(),
        "imports against lib.rs's floors:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_floor_check_sees_a_violation() {
    let graph = file_graph();
    let floors = floors();
    let mut top = level(&graph, &[]);
    // The arrow that used to add a floor: kafka's scan reporting through monitor.
    top.get_mut("kafka").unwrap().insert("monitor".into());
    let found = against_the_floors(&top, &floors);
    assert_eq!(found, ["kafka (floor 1) imports monitor (floor 2)"]);
}

#[test]
fn hidden_arrows_are_seen() {
    let read = |module: &[&str], is_folder: bool, code: &str| {
        let mut reader = Reader {
            module: module.iter().map(|m| m.to_string()).collect(),
            is_folder,
            file: File {
                named: Vec::new(),
                relative: Vec::new(),
                uses: BTreeMap::new(),
            },
        };
        reader.visit_file(&syn::parse_file(code).unwrap());
        reader.file
    };
    // Inside a macro's arguments.
    let file = read(
        &["cli", "status"],
        false,
        "fn f() { anyhow::bail!(\"{}\", super::no_store_at(d)) }",
    );
    assert!(
        file.named
            .contains(&vec!["cli".to_string(), "no_store_at".to_string()]),
        "{:?}",
        file.named
    );
    // A child module's path in code, and a path through a `use`d name.
    let file = read(
        &["pipeline"],
        true,
        "use crate::sink; fn f() { standby::alternate(); sink::open(); }",
    );
    assert!(file
        .relative
        .contains(&vec!["standby".to_string(), "alternate".to_string()]));
    assert!(file
        .relative
        .contains(&vec!["sink".to_string(), "open".to_string()]));
    assert_eq!(file.uses["sink"], vec!["sink".to_string()]);
    // And the graph resolves them: pipeline/mod.rs reaches its standby file.
    let graph = file_graph();
    let pipeline = &graph[&vec!["pipeline".to_string()]];
    assert!(
        pipeline.contains(&vec!["pipeline".to_string(), "standby".to_string()]),
        "{pipeline:?}"
    );
}
