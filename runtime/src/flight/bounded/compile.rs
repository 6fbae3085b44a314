//! What compiling a regular expression holds, known before the function compiles it.
//!
//! Three costs no `memory_usage()` reports, each shown to abort the process:
//! - parsing: the syntax tree and its translation are built whole before the compiled
//!   expression's size limit is checked. A class escape costs kilobytes (`\w` is ~700 Unicode
//!   ranges): `repeat('\w', 1000000)` asked for about 6 GB;
//! - compiling: the automaton is built up to the `regex` crate's 10 MiB limit before that limit
//!   refuses it, forwards and in reverse;
//! - capture groups: a search for groups keeps a slot for every group in every state, twice
//!   (`regexp_match(s, repeat('(a?)', 8000))`: 32,005 states × 16,002 slots × 8 bytes × 2 =
//!   8 GB, allocated at the first search).
//!
//! So a pattern is compiled here first, with what parsing and compiling may hold reserved from
//! the query's pool while it is, to learn what the compiled expression holds ([`held_by`]);
//! the function's call then holds that reserved while it runs (see `patterns::by_pattern`).
//! What a pattern holds is kept for the rest of the statement ([`Measured`]), so a constant
//! pattern is compiled once here, not once per batch.

use std::collections::HashMap;
use std::sync::Mutex;

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use regex_automata::meta;
use regex_automata::nfa::thompson::State;

use super::{Budget, MIB};

/// What parsing holds for each byte of a pattern, at most: measured 92 (literals) to 311
/// (`a.*`, `.` being a class of its own) bytes.
const PARSE_PER_BYTE: usize = 512;

/// What parsing holds for each class escape or bracket (`\w`, `\pL`, `[…]`), at most: its
/// Unicode ranges, measured up to 6.8 KB (`\w`) …
const PARSE_PER_CLASS: usize = 16 * 1024;
/// … and in a pattern that ignores case, which adds every range's other cases (`\pL`'s 660
/// ranges gain about 2,900, 42 KB).
const PARSE_PER_FOLDED_CLASS: usize = 64 * 1024;

/// The largest automaton the `regex` crate builds (its default `size_limit`), which DataFusion
/// and Arrow compile with.
const NFA_LIMIT: usize = 10 * MIB;

/// A pattern is compiled within each of these limits in turn, until its automaton fits (most
/// patterns fit the first): what compiling reserves grows with the limit.
const NFA_LIMITS: [usize; 3] = [64 * 1024, MIB, NFA_LIMIT];

/// What compiling holds, in times its automaton's limit: the automaton while it is built and
/// when done, forwards and in reverse.
const COMPILING_PER_LIMIT: usize = 4;

/// What a compiled expression may hold beyond its own size while it searches: its lazy DFAs'
/// caches, forwards and in reverse (2 MiB each in the `regex` crate).
const SEARCH_CACHE_BYTES: usize = 4 * MIB;

/// What a compiled expression's search caches may hold for each byte of the expression (the
/// backtracker's visited set, a one-pass DFA's captures): about 4 times over, measured.
const CACHE_PER_BYTE: usize = 4;

/// Patterns the statement measured, for the rest of it, at most this many …
const MEASURED_PATTERNS: usize = 1024;
/// … and of at most this many bytes together.
const MEASURED_PATTERN_BYTES: usize = MIB;

/// What `pattern` holds compiled and searching, at least what compiling it holds; a pattern
/// that does not compile holds what compiling it held until it failed (the function refuses
/// it). Refused (RESOURCE_EXHAUSTED, naming `function`) when what compiling may hold does not
/// fit the query's pool.
pub(super) fn held_by(function: &str, pattern: &str, budget: &Budget) -> Result<usize> {
    if let Some(held) = budget.measured.get(pattern) {
        return Ok(held);
    }
    let held = measure(function, pattern, budget)?;
    budget.measured.keep(pattern, held);
    Ok(held)
}

/// [`held_by`], compiled within the smallest limit first: a pattern whose automaton outgrows
/// it is compiled again within the next, with what that may hold reserved instead.
fn measure(function: &str, pattern: &str, budget: &Budget) -> Result<usize> {
    let parsing = parsing(pattern);
    let compiling =
        |limit: usize| parsing.saturating_add(limit.saturating_mul(COMPILING_PER_LIMIT));
    for limit in NFA_LIMITS {
        budget.deadline.check(function)?;
        let held = format!("pattern of {} bytes, while it is compiled,", pattern.len());
        let _compiling = reserve(function, &held, compiling(limit), budget)?;
        let built = meta::Regex::builder()
            .configure(meta::Config::new().nfa_size_limit(Some(limit)))
            .build(pattern);
        match built {
            Ok(compiled) => return Ok(searching(&compiled).max(compiling(limit))),
            Err(e) if e.size_limit().is_some() && limit < NFA_LIMIT => continue,
            Err(_) => return Ok(compiling(limit)),
        }
    }
    // The last limit is the full one: every pattern ends above.
    Ok(compiling(NFA_LIMIT))
}

/// What parsing `pattern` may hold, at most (see [`PARSE_PER_BYTE`], [`PARSE_PER_CLASS`]).
pub(super) fn parsing(pattern: &str) -> usize {
    let per_class = if ignores_case(pattern) {
        PARSE_PER_FOLDED_CLASS
    } else {
        PARSE_PER_CLASS
    };
    let bytes = pattern.as_bytes();
    let mut classes = 0usize;
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => {
                if matches!(
                    bytes.get(at + 1),
                    Some(b'w' | b'W' | b'd' | b'D' | b's' | b'S' | b'p' | b'P')
                ) {
                    classes += 1;
                }
                at += 2;
            }
            b'[' => {
                classes += 1;
                at += 1;
            }
            _ => at += 1,
        }
    }
    bytes
        .len()
        .saturating_mul(PARSE_PER_BYTE)
        .saturating_add(classes.saturating_mul(per_class))
}

/// Whether some part of `pattern` may ignore case: a group of flags (`(?i)`, `(?si:…)`) naming
/// `i`, wherever it is (an `i` turned off, `(?-i)`, counts too), or `x`, after which a group of
/// flags may be spelled with spaces and comments (`(?x)( ?i)`).
fn ignores_case(pattern: &str) -> bool {
    pattern.match_indices("(?").any(|(at, _)| {
        pattern[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphabetic() || *c == '-')
            .any(|c| c == 'i' || c == 'x')
    })
}

/// What `compiled` holds while it searches: itself, its caches, and a PikeVM's slot tables (a
/// slot per capture group in each state, for the current and the next position).
fn searching(compiled: &meta::Regex) -> usize {
    let size = compiled.memory_usage();
    // Its automata's states are among what it holds: no more states than fit in that.
    let states = size / std::mem::size_of::<State>().max(1);
    let slots = compiled.group_info().slot_len();
    let slot_tables = states
        .saturating_add(1)
        .saturating_mul(slots)
        .saturating_add(states)
        .saturating_mul(2 * std::mem::size_of::<usize>());
    size.saturating_mul(1 + CACHE_PER_BYTE)
        .saturating_add(slot_tables)
        .saturating_add(SEARCH_CACHE_BYTES)
}

/// Reserves `bytes` from the query's pool for what `function`'s `held` (its patterns, compiled
/// or compiling) holds, for as long as the reservation lives.
pub(super) fn reserve(
    function: &str,
    held: &str,
    bytes: usize,
    budget: &Budget,
) -> Result<MemoryReservation> {
    let reservation =
        MemoryConsumer::new(format!("lake: {function}() patterns")).register(&budget.pool);
    reservation.try_grow(bytes).map_err(|_| {
        DataFusionError::ResourcesExhausted(format!(
            "{}'s {held} would hold {bytes} bytes; the query holds {} of its {} MiB \
             (LAKE_QUERY_MEMORY_LIMIT_MB)",
            super::shown(function),
            budget.pool.reserved(),
            budget.limit() / MIB
        ))
    })?;
    Ok(reservation)
}

/// What the statement's patterns hold compiled, as measured (see [`held_by`]).
#[derive(Debug, Default)]
pub(super) struct Measured(Mutex<Kept>);

#[derive(Debug, Default)]
struct Kept {
    held: HashMap<String, usize>,
    /// The patterns' bytes together.
    bytes: usize,
}

impl Measured {
    fn get(&self, pattern: &str) -> Option<usize> {
        let kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        kept.held.get(pattern).copied()
    }

    /// Keeps `pattern`'s measure while few and small enough are kept (past that, a pattern is
    /// measured again in each batch it is in).
    fn keep(&self, pattern: &str, held: usize) {
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let bytes = kept.bytes.saturating_add(pattern.len());
        if kept.held.len() < MEASURED_PATTERNS && bytes <= MEASURED_PATTERN_BYTES {
            kept.held.insert(pattern.to_owned(), held);
            kept.bytes = bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::budget;
    use super::*;

    /// Capture groups cost a slot in every state, searched twice over: 8,000 groups measured
    /// at the gigabytes the first search allocates (8 GB, seen aborting the process).
    #[test]
    fn capture_groups_are_measured_in_every_state() {
        let budget = budget(1 << 30);
        let groups = held_by("regexp_match", &"(a?)".repeat(8000), &budget).unwrap();
        assert!(groups > 8_000_000_000, "{groups}");
        let few = held_by("regexp_match", &"(a?)".repeat(8), &budget).unwrap();
        assert!(few < 16 * MIB, "{few}");
    }

    /// A pattern whose parsing alone would outgrow the budget is refused before it is parsed:
    /// `\w` a million times would have taken 6 GB while its syntax was translated.
    #[test]
    fn parsing_is_reserved_before_a_pattern_is_compiled() {
        let budget = budget(256 * MIB);
        let pattern = "\\w".repeat(1_000_000);
        let refused = held_by("regexp_like", &pattern, &budget).unwrap_err();
        assert!(
            matches!(&refused, DataFusionError::ResourcesExhausted(m)
                if m.contains("2000000 bytes") && m.contains("while it is compiled")),
            "{refused}"
        );
        assert_eq!(budget.pool.reserved(), 0);
        // Literals cost less than classes, and classes whose case is ignored more.
        assert!(parsing(&"\\w".repeat(1000)) > parsing(&"a".repeat(2000)));
        let folded = format!("(?i){}", "\\pL".repeat(1000));
        assert!(parsing(&folded) >= 1000 * PARSE_PER_FOLDED_CLASS);
        assert!(ignores_case("a(?s-i:b)") && !ignores_case("(?s)a(b)"));
        assert!(ignores_case("(?x)( ?i)\\pL"));
    }

    /// A pattern's automaton outgrowing the small limit is compiled again within the full one
    /// (it is what the function compiles); one outgrowing the full limit holds what compiling
    /// it held.
    #[test]
    fn large_automata_are_compiled_within_the_full_limit() {
        let budget = budget(1 << 30);
        let large = held_by("regexp_like", "a{100000}", &budget).unwrap();
        assert!(large >= NFA_LIMIT * COMPILING_PER_LIMIT, "{large}");
        let too_large = held_by("regexp_like", "(a{1000}){1000}", &budget).unwrap();
        assert_eq!(
            too_large,
            parsing("(a{1000}){1000}") + NFA_LIMIT * COMPILING_PER_LIMIT
        );
        assert_eq!(budget.pool.reserved(), 0);
    }
}
