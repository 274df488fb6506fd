//! Fuzzes xlurmd's submission checks: arbitrary bytes become an `a{sv}` spec
//! (known, hostile and random keys; values of every D-Bus type; paths, env
//! entries and numbers at their edges), which goes through `spec::parse`, the
//! working directory check (`as_user::dir_problem_here`),
//! `core::request::validate` against a fixed machine and `unit::properties`.
//! The invariants (no panic, a message for every refusal, documented bounds
//! and a unit systemd accepts for every accepted spec) live in
//! `tests/security_invariants.rs`, shared with the stable proptest.
#![no_main]

#[path = "../../tests/security_invariants.rs"]
mod invariants;

use invariants::{check, to_map, HOSTILE_KEYS, V};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use xlurm::wire::spec::KEYS;

const TEXTS: [&str; 16] = [
    "/",
    "/tmp",
    "/bin/true",
    "relative/dir",
    "/nonexistent/dir",
    "/etc/passwd",
    "/proc/self/status/x",
    "",
    "a\0b",
    "nv",
    "auto",
    "asc",
    "A=1",
    "XLURM_JOB_ID=1",
    "1BAD=x",
    "/tmp/../etc",
];

fn text(u: &mut Unstructured) -> Result<String> {
    Ok(match u.int_in_range(0u8..=5)? {
        0 | 1 => TEXTS[u.choose_index(TEXTS.len())?].to_string(),
        2 => {
            // A path with components of chosen lengths (up to past NAME_MAX and PATH_MAX).
            let n = u.int_in_range(1usize..=40)?;
            let mut p = String::new();
            for _ in 0..n {
                let len = match u.int_in_range(0u8..=3)? {
                    0 => u.int_in_range(0usize..=3)?,
                    1 => u.int_in_range(250usize..=260)?,
                    _ => u.int_in_range(1usize..=120)?,
                };
                p.push('/');
                p.push_str(&"d".repeat(len));
            }
            p
        }
        3 => {
            let name = if u.arbitrary()? { "A_1" } else { "1A-b" };
            format!("{name}={}", String::from(u.arbitrary::<&str>()?))
        }
        _ => u.arbitrary::<String>()?,
    })
}

fn number_u32(u: &mut Unstructured) -> Result<u32> {
    Ok(match u.int_in_range(0u8..=3)? {
        0 => [0, 1, 2, 4, 8, 9, u32::MAX][u.choose_index(7)?],
        _ => u.arbitrary()?,
    })
}

fn number_u64(u: &mut Unstructured) -> Result<u64> {
    Ok(match u.int_in_range(0u8..=3)? {
        0 => [0, 1, 60, 604_800, 604_801, 1 << 30, 16 << 30, u64::MAX][u.choose_index(8)?],
        _ => u.arbitrary()?,
    })
}

fn value(u: &mut Unstructured, depth: u8) -> Result<V> {
    let len = |u: &mut Unstructured| u.int_in_range(0usize..=6);
    Ok(match u.int_in_range(0u8..=15)? {
        0 => V::Bool(u.arbitrary()?),
        1 => V::U8(u.arbitrary()?),
        2 => V::I16(u.arbitrary()?),
        3 => V::U16(u.arbitrary()?),
        4 => V::I32(u.arbitrary()?),
        5 => V::U32(number_u32(u)?),
        6 => V::I64(u.arbitrary()?),
        7 => V::U64(number_u64(u)?),
        8 => V::F64(u.arbitrary()?),
        9 => V::Str(text(u)?),
        10 => V::Strs((0..len(u)?).map(|_| text(u)).collect::<Result<_>>()?),
        11 => V::U32s((0..len(u)?).map(|_| number_u32(u)).collect::<Result<_>>()?),
        12 => V::U64s((0..len(u)?).map(|_| number_u64(u)).collect::<Result<_>>()?),
        13 => V::Bytes(u.arbitrary()?),
        14 if depth < 3 => V::Nested(Box::new(value(u, depth + 1)?)),
        _ => V::Dict(
            (0..len(u)?)
                .map(|_| Ok((u.arbitrary::<String>()?, u.arbitrary::<u32>()?)))
                .collect::<Result<_>>()?,
        ),
    })
}

/// A value of the type the key takes.
fn typed(u: &mut Unstructured, key: &str) -> Result<V> {
    let n = u.int_in_range(0usize..=6)?;
    Ok(match key {
        "argv" | "env" => V::Strs((0..n).map(|_| text(u)).collect::<Result<_>>()?),
        "script" | "cwd" | "name" | "vendor" => V::Str(text(u)?),
        "cpus" | "gpus" => V::U32(number_u32(u)?),
        "mem" | "time_limit" => V::U64(number_u64(u)?),
        "device_ids" | "exclude_device_ids" => {
            V::U32s((0..n).map(|_| u.int_in_range(0u32..=7)).collect::<Result<_>>()?)
        }
        _ => V::Bool(u.arbitrary()?),
    })
}

fn entries(u: &mut Unstructured) -> Result<Vec<(String, V)>> {
    let mut e = Vec::new();
    if u.arbitrary()? {
        e.push(("argv".to_string(), V::Strs(vec!["/bin/true".into()])));
        e.push(("cwd".to_string(), V::Str("/".into())));
    }
    for _ in 0..u.int_in_range(0usize..=12)? {
        let (k, v) = match u.int_in_range(0u8..=9)? {
            0..=5 => {
                let k = KEYS[u.choose_index(KEYS.len())?].0;
                (k.to_string(), typed(u, k)?)
            }
            6 | 7 => {
                let k = KEYS[u.choose_index(KEYS.len())?].0;
                (k.to_string(), value(u, 0)?)
            }
            8 => (
                HOSTILE_KEYS[u.choose_index(HOSTILE_KEYS.len())?].to_string(),
                value(u, 0)?,
            ),
            _ => (u.arbitrary::<String>()?, value(u, 0)?),
        };
        e.push((k, v));
    }
    Ok(e)
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    if let Ok(e) = entries(&mut u) {
        check(&to_map(&e));
    }
});
