//! No import cycles between the modules of any library crate of the workspace: the engine
//! (`wal/src`), the format crate, the state layer, the simulator, the verifier, `walcheck`, the
//! Raft adapter, the catalog, the fixtures, the power-loss campaign and the benchmarks' library;
//! nor between those of a binary with modules of its own (`src/bin/<name>/`), read as the crate
//! it is.
//!
//! Reads the sources, resolves every path that names something of the crate (`use crate::..`,
//! `use super::..`, `crate::x::y` and `super::x` in code, `$crate::` in macros, the names a
//! `mod.rs` or `lib.rs` brings into scope from its children) to the module that defines it, and
//! builds one graph per level of the module tree: among the top-level modules (what `storage/`
//! holds counts as `storage`), and among the files of each directory module. An edge joins two
//! siblings when anything in one (or below it) names something in the other (or below it); a
//! module naming its own parent or child makes no edge (a `mod.rs` declares, re-exports and
//! holds its children's types, and they extend its types). Comments and string literals are
//! not read, so a doc link makes no edge. Any cycle fails the test, named.
//!
//! Plain Rust, no dependency: a small lexer, a parser for `use` trees, Tarjan's strongly
//! connected components.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Cycles allowed on purpose, each as its modules' paths (`a::b`), sorted. None today.
const ALLOWED: &[&[&str]] = &[];

type ModPath = Vec<String>;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Punct(char),
}

/// The tokens of a source file, without comments, strings, chars or lifetimes.
fn lex(src: &str) -> Vec<Tok> {
    let b: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if (c == 'r' || c == 'b')
            && raw_string_start(&b, i).is_some()
            && (i == 0 || !is_ident_char(b[i - 1]))
        {
            let (hashes, body) = raw_string_start(&b, i).unwrap();
            i = body;
            loop {
                if i >= b.len() {
                    break;
                }
                if b[i] == '"' && (0..hashes).all(|k| b.get(i + 1 + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}'), or a lifetime or label ('a): skipped alike.
            if next == Some('\\') {
                i += 3;
                while i < b.len() && b[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if b.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < b.len() && is_ident_char(b[i]) {
                    i += 1;
                }
            }
        } else if c == ':' && next == Some(':') {
            out.push(Tok::PathSep);
            i += 2;
        } else if is_ident_char(c) {
            let start = i;
            while i < b.len() && is_ident_char(b[i]) {
                i += 1;
            }
            let word: String = b[start..i].iter().collect();
            let word = word.strip_prefix("r#").map(str::to_owned).unwrap_or(word);
            if !word.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                out.push(Tok::Ident(word));
            }
        } else {
            if !c.is_whitespace() {
                out.push(Tok::Punct(c));
            }
            i += 1;
        }
    }
    out
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// At `r"`, `r#"`, `br"`..: the number of `#` and where the body starts.
fn raw_string_start(b: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if b.get(j) == Some(&'b') {
        j += 1;
    }
    if b.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while b.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (b.get(j) == Some(&'"')).then_some((hashes, j + 1))
}

/// One name a `use` brings into scope: the path it names and the name it takes (`None` for a
/// glob).
struct UseItem {
    path: Vec<String>,
    name: Option<String>,
}

/// Expands the use tree in `t` (the tokens between `use` and `;`).
fn use_tree(t: &[Tok], prefix: &[String], out: &mut Vec<UseItem>) -> usize {
    let mut path = prefix.to_vec();
    let mut i = 0;
    while i < t.len() {
        match &t[i] {
            Tok::Ident(w) if w == "as" => {
                if let Some(Tok::Ident(alias)) = t.get(i + 1) {
                    out.push(UseItem { path: path.clone(), name: Some(alias.clone()) });
                }
                return i + 2;
            }
            Tok::Ident(w) => {
                path.push(w.clone());
                i += 1;
            }
            Tok::PathSep => i += 1,
            Tok::Punct('$') => i += 1,
            Tok::Punct('*') => {
                out.push(UseItem { path: path.clone(), name: None });
                return i + 1;
            }
            Tok::Punct('{') => {
                i += 1;
                loop {
                    match t.get(i) {
                        None => return i,
                        Some(Tok::Punct('}')) => return i + 1,
                        Some(Tok::Punct(',')) => i += 1,
                        Some(_) => i += use_tree(&t[i..], &path, out),
                    }
                }
            }
            Tok::Punct(_) => break,
        }
    }
    if let Some(last) = path.last().filter(|_| path.len() > prefix.len()) {
        let (path, name) = if last == "self" {
            let p = path[..path.len() - 1].to_vec();
            let n = p.last().cloned();
            (p, n)
        } else {
            (path.clone(), Some(last.clone()))
        };
        out.push(UseItem { path, name });
    }
    i
}

/// A path as written in a module (`crate::..`, `super::..`, `self::..`, or relative), made
/// absolute. `None` for a path outside the crate (std, another crate).
fn absolute(at: &[String], path: &[String], children: &BTreeSet<ModPath>) -> Option<ModPath> {
    let first = path.first()?;
    match first.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "self" => Some(at.iter().chain(&path[1..]).cloned().collect()),
        "super" => {
            let mut base = at.to_vec();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            Some(base.into_iter().chain(rest.iter().cloned()).collect())
        }
        _ => {
            // Relative to this module: only a child module counts (else an external crate).
            let mut child = at.to_vec();
            child.push(first.clone());
            children.contains(&child).then(|| at.iter().chain(path).cloned().collect())
        }
    }
}

/// Everything read from the sources.
#[derive(Default)]
struct Crate {
    /// Every module (files and inline `mod x { .. }`), the root `[]` included.
    modules: BTreeSet<ModPath>,
    /// Per module, the names its `use` items bring in: name → absolute path.
    imports: BTreeMap<ModPath, BTreeMap<String, ModPath>>,
    /// Every crate path named, with the module naming it, and the file and line for the report.
    refs: Vec<(ModPath, ModPath)>,
}

impl Crate {
    /// The module that defines what `path` names: the deepest module along it, or, where the
    /// path goes on through a name a module imports, where that import leads.
    fn resolve(&self, path: &[String], depth: usize) -> ModPath {
        let mut cur: ModPath = Vec::new();
        for (k, seg) in path.iter().enumerate() {
            let mut child = cur.clone();
            child.push(seg.clone());
            if self.modules.contains(&child) {
                cur = child;
                continue;
            }
            if let Some(target) = self.imports.get(&cur).and_then(|m| m.get(seg)) {
                if depth < 16 {
                    let mut full = target.clone();
                    full.extend(path[k + 1..].iter().cloned());
                    return self.resolve(&full, depth + 1);
                }
            }
            return cur;
        }
        cur
    }
}

fn module_path_of(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap();
    let stem = last.strip_suffix(".rs").unwrap().to_owned();
    if stem != "mod" && !(parts.is_empty() && (stem == "lib" || stem == "main")) {
        parts.push(stem);
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The inline modules of a file and, per token, the module it is in.
fn inline_modules(file_mod: &ModPath, toks: &[Tok]) -> Vec<ModPath> {
    let mut at = Vec::with_capacity(toks.len());
    let mut stack: Vec<(ModPath, usize)> = vec![(file_mod.clone(), 0)];
    let mut depth = 0usize;
    for (i, t) in toks.iter().enumerate() {
        at.push(stack.last().unwrap().0.clone());
        match t {
            Tok::Punct('{') => {
                depth += 1;
                let inline =
                    i >= 2 && toks[i - 2] == Tok::Ident("mod".into()) && matches!(toks[i - 1], Tok::Ident(_));
                if let (true, Tok::Ident(name)) = (inline, &toks[i - 1]) {
                    let mut m = stack.last().unwrap().0.clone();
                    m.push(name.clone());
                    stack.push((m, depth));
                }
            }
            Tok::Punct('}') => {
                if stack.len() > 1 && stack.last().unwrap().1 == depth {
                    stack.pop();
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
    }
    at
}

fn read_crate(src: &Path) -> Crate {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    // A library's binaries (`main.rs`, `bin/`) are crates of their own: read on their own.
    if src.join("lib.rs").exists() {
        files.retain(|f| !f.starts_with(src.join("bin")) && *f != src.join("main.rs"));
    }
    let lexed: Vec<(ModPath, Vec<Tok>)> =
        files.iter().map(|f| (module_path_of(src, f), lex(&std::fs::read_to_string(f).unwrap()))).collect();
    let mut c = Crate::default();
    let mut located = Vec::new();
    for (m, toks) in &lexed {
        let at = inline_modules(m, toks);
        for (i, _) in toks.iter().enumerate() {
            c.modules.insert(at[i].clone());
        }
        c.modules.insert(m.clone());
        located.push(at);
    }
    // Every ancestor of a module is one.
    for m in c.modules.clone() {
        for k in 0..m.len() {
            c.modules.insert(m[..k].to_vec());
        }
    }
    for ((_, toks), at) in lexed.iter().zip(&located) {
        let mut i = 0;
        while i < toks.len() {
            let here = &at[i];
            let is_use =
                toks[i] == Tok::Ident("use".into()) && (i == 0 || !matches!(toks[i - 1], Tok::PathSep));
            if is_use {
                let end = (i..toks.len()).find(|&k| toks[k] == Tok::Punct(';')).unwrap_or(toks.len());
                let mut items = Vec::new();
                use_tree(&toks[i + 1..end], &[], &mut items);
                for it in items {
                    let Some(abs) = absolute(here, &it.path, &c.modules) else { continue };
                    if let Some(name) = it.name {
                        c.imports.entry(here.clone()).or_default().insert(name, abs.clone());
                    }
                    c.refs.push((here.clone(), abs));
                }
                i = end;
                continue;
            }
            let starts_path = matches!(&toks[i], Tok::Ident(w) if w == "crate" || w == "super" || w == "self")
                && toks.get(i + 1) == Some(&Tok::PathSep)
                && (i == 0 || toks[i - 1] != Tok::PathSep);
            if starts_path {
                let mut path = Vec::new();
                let mut k = i;
                while let Some(Tok::Ident(w)) = toks.get(k) {
                    path.push(w.clone());
                    if toks.get(k + 1) != Some(&Tok::PathSep) {
                        break;
                    }
                    k += 2;
                }
                if let Some(abs) = absolute(here, &path, &c.modules) {
                    c.refs.push((here.clone(), abs));
                }
                i = k + 1;
                continue;
            }
            i += 1;
        }
    }
    c
}

/// The edges between siblings of the module tree: (from, to), each a module path.
fn edges(c: &Crate) -> BTreeSet<(ModPath, ModPath)> {
    let mut out = BTreeSet::new();
    for (from, path) in &c.refs {
        let to = c.resolve(path, 0);
        let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
        if common < from.len() && common < to.len() {
            out.insert((from[..=common].to_vec(), to[..=common].to_vec()));
        }
    }
    out
}

/// The strongly connected components of more than one module (Tarjan).
fn cycles(edges: &BTreeSet<(ModPath, ModPath)>) -> Vec<Vec<ModPath>> {
    let nodes: BTreeSet<&ModPath> = edges.iter().flat_map(|(a, b)| [a, b]).collect();
    let nodes: Vec<&ModPath> = nodes.into_iter().collect();
    let index_of: BTreeMap<&ModPath, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let mut succ = vec![Vec::new(); nodes.len()];
    for (a, b) in edges {
        succ[index_of[a]].push(index_of[b]);
    }
    struct T {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(v: usize, succ: &[Vec<usize>], t: &mut T) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in &succ[v] {
            match t.index[w] {
                None => {
                    visit(w, succ, t);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(i) if t.on[w] => t.low[v] = t.low[v].min(i),
                _ => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                scc.push(w);
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                t.out.push(scc);
            }
        }
    }
    let n = nodes.len();
    let mut t = T {
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            visit(v, &succ, &mut t);
        }
    }
    let mut out: Vec<Vec<ModPath>> =
        t.out.into_iter().map(|s| s.into_iter().map(|i| nodes[i].clone()).collect()).collect();
    for s in &mut out {
        s.sort();
    }
    out.sort();
    out
}

fn name(m: &ModPath) -> String {
    m.join("::")
}

/// One cycle through the component `scc`, as `a -> b -> .. -> a`.
fn one_cycle(scc: &[ModPath], edges: &BTreeSet<(ModPath, ModPath)>) -> String {
    let inside: BTreeSet<&ModPath> = scc.iter().collect();
    let start = &scc[0];
    // Breadth-first from `start` back to it, within the component.
    let mut prev: BTreeMap<&ModPath, &ModPath> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for (a, b) in edges.iter().filter(|(a, b)| a == v && inside.contains(b)) {
            if b == start {
                let mut path = vec![name(b), name(a)];
                let mut at = a;
                while at != start {
                    at = prev[at];
                    path.push(name(at));
                }
                path.reverse();
                return path.join(" -> ");
            }
            if !prev.contains_key(b) && b != start {
                prev.insert(b, a);
                queue.push_back(b);
            }
        }
    }
    unreachable!("a strongly connected component has a cycle through each of its nodes")
}

/// The crates checked: every library crate of the workspace, each on its own (an edge between
/// two crates is a dependency Cargo already keeps one-way), and each binary of theirs with
/// modules of its own (`src/bin/<name>/main.rs`), as the crate it is.
fn crate_dirs() -> Vec<(String, PathBuf)> {
    let wal = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = wal.parent().expect("wal/ is in the workspace");
    [
        "wal/src",
        "wal/format/src",
        "wal/state/src",
        "wal/sim/src",
        "wal/rng/src",
        "verifier/src",
        "cli/src",
        "raft/src",
        "catalog/src",
        "fixtures/src",
        "powerloss/src",
        "benches/src",
    ]
    .into_iter()
    .flat_map(|label| {
        let lib = (label.to_string(), root.join(label));
        let bins = std::fs::read_dir(root.join(label).join("bin"))
            .into_iter()
            .flatten()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("main.rs").exists())
            .map(|p| (p.strip_prefix(root).unwrap().display().to_string(), p));
        std::iter::once(lib).chain(bins).collect::<Vec<_>>()
    })
    .collect()
}

#[test]
fn no_import_cycles_between_the_modules_of_any_crate() {
    let mut found = Vec::new();
    for (label, dir) in crate_dirs() {
        let c = read_crate(&dir);
        let e = edges(&c);
        for scc in cycles(&e) {
            let names: Vec<String> = scc.iter().map(name).collect();
            if ALLOWED.iter().any(|a| a.iter().copied().eq(names.iter().map(String::as_str))) {
                continue;
            }
            found.push(format!("{label}: {{{}}}: {}", names.join(", "), one_cycle(&scc, &e)));
        }
        if std::env::var_os("WAL_MODULE_EDGES").is_some() {
            for (a, b) in &e {
                println!("{label}: {} -> {}", name(a), name(b));
            }
        }
    }
    assert!(found.is_empty(), "import cycles between modules:\n{}", found.join("\n"));
}

/// The checker sees the edges it must: a sanity check on the sources themselves, so that a
/// checker that reads nothing cannot pass.
#[test]
fn the_checker_sees_known_edges() {
    let dirs = crate_dirs();
    let (engine, format) = (&dirs[0].1, &dirs[1].1);
    let e = edges(&read_crate(format));
    let has = |a: &str, b: &str| e.contains(&(vec![a.to_owned()], vec![b.to_owned()]));
    assert!(has("scan", "format"), "scan uses the format's constants");
    assert!(has("classify", "stale"), "the decision table reads stale tables");
    assert!(e.len() > 10, "only {} edges in the format crate", e.len());
    let e = edges(&read_crate(engine));
    let has = |a: &str, b: &str| e.contains(&(vec![a.to_owned()], vec![b.to_owned()]));
    assert!(has("recovery", "storage"), "recovery reads segments through the storage seam");
    assert!(has("io_thread", "log"), "the writer thread drives the log");
    assert!(e.len() > 30, "only {} edges in the engine", e.len());
    // A binary is read as a crate of its own: its `crate::` paths name its own modules.
    let (_, workload) = dirs
        .iter()
        .find(|(l, _)| l.ends_with("bin/powerloss-workload"))
        .expect("the workload binary is checked");
    let e = edges(&read_crate(workload));
    assert!(
        e.contains(&(vec!["pipeline".to_owned()], vec!["check".to_owned()])),
        "the power-loss workload's pipeline oracle uses its plain check: {e:?}"
    );
}

#[test]
fn a_cycle_is_found_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let write = |p: &str, s: &str| {
        let p = dir.path().join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, s).unwrap();
    };
    write("lib.rs", "mod a;\nmod b;\nmod d;\npub use d::Thing;\n");
    // a -> b through a `use`, b -> d through lib.rs's re-export, d -> a inline; comments, strings
    // and a child's use of its parent make no edge.
    write("a.rs", "use crate::b::f;\n// crate::d::x\nfn g() { let _ = \"crate::d::y\"; }\n");
    write("b.rs", "pub fn f() -> crate::Thing { todo!() }\n");
    write("d/mod.rs", "mod e;\npub struct Thing;\nfn h() { crate::a::g(); }\n");
    write("d/e.rs", "use super::Thing;\n#[cfg(test)]\nmod tests { use super::super::Thing; }\n");
    let c = read_crate(dir.path());
    let e = edges(&c);
    let found = cycles(&e);
    assert_eq!(found, vec![vec![vec!["a".to_owned()], vec!["b".to_owned()], vec!["d".to_owned()]]]);
    assert_eq!(one_cycle(&found[0], &e), "a -> b -> d -> a");
    assert_eq!(e.len(), 3, "{e:?}");
}
