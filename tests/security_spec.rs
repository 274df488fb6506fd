//! Random `a{sv}` submissions through `spec::parse`, the working directory
//! check, `request::validate` and `unit::properties`, as xlurmd handles a
//! `Submit` call: no input panics, every refusal has a message, and every
//! accepted spec satisfies the documented bounds and gives a unit systemd
//! accepts, running as the submitter with `NoNewPrivileges=yes` (see
//! `security_invariants.rs` for each check).
//!
//! The generator mixes well-formed values with hostile ones: wrong types, keys
//! that try to pick the user or unit, NUL bytes, overlong paths, bad
//! environment names, numbers at 0 and at the type's maximum, huge arrays.
//! `cargo fuzz` runs the same checks on arbitrary bytes (`fuzz/`).

#[path = "security_invariants.rs"]
mod invariants;

use invariants::{check, to_map, Verdict, HOSTILE_KEYS, V};
use proptest::prelude::*;
use xlurm::daemon::spec;
use xlurm::wire::spec::KEYS;

/// Strings a caller might send: paths, env entries, junk, NUL, long ones.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => Just("/".to_string()),
        2 => Just("/tmp".to_string()),
        2 => Just("/bin/true".to_string()),
        1 => Just("relative/dir".to_string()),
        1 => Just("/nonexistent/dir".to_string()),
        1 => Just("/etc/passwd".to_string()),
        1 => Just("/tmp/../etc".to_string()),
        1 => Just(String::new()),
        1 => Just("a\0b".to_string()),
        1 => Just("/x\0".to_string()),
        1 => Just("nv".to_string()),
        1 => Just("auto".to_string()),
        1 => Just("amd".to_string()),
        2 => "[ -~]{0,24}",
        1 => "/[a-z]{250,260}",
        1 => "(/[a-z]{1,3}){1000,1400}",
        1 => any::<String>(),
    ]
}

fn env_entry() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[A-Z_][A-Z0-9_]{0,8}=[ -~]{0,12}",
        1 => Just("NOEQUALS".to_string()),
        1 => Just("1BAD=x".to_string()),
        1 => Just("A-B=1".to_string()),
        1 => Just("=empty".to_string()),
        1 => Just("XLURM_JOB_ID=999".to_string()),
        1 => Just("CUDA_VISIBLE_DEVICES=0,1,2".to_string()),
        1 => Just("A=x\0y".to_string()),
        1 => Just("A=line\nbreak\ttab\u{1b}esc".to_string()),
        1 => any::<String>(),
    ]
}

fn small_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(1),
        Just(2),
        Just(3),
        Just(4),
        Just(8),
        Just(9),
        Just(u32::MAX),
        Just(u32::MAX - 1),
        any::<u32>(),
    ]
}

fn big_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(60),
        Just(7 * 86_400),
        Just(7 * 86_400 + 1),
        Just(1 << 20),
        Just(1 << 30),
        Just(16 << 30),
        Just((16 << 30) + 1),
        Just(u64::MAX),
        Just(u64::MAX / 1_000_000 + 1),
        Just(u64::MAX - 1),
        Just(-1i64 as u64),
        any::<u64>(),
    ]
}

/// A value of any D-Bus type, biased to the types the spec uses.
fn value() -> impl Strategy<Value = V> {
    let leaf = prop_oneof![
        2 => any::<bool>().prop_map(V::Bool),
        1 => any::<u8>().prop_map(V::U8),
        1 => any::<i16>().prop_map(V::I16),
        1 => any::<u16>().prop_map(V::U16),
        1 => any::<i32>().prop_map(V::I32),
        3 => small_u32().prop_map(V::U32),
        1 => any::<i64>().prop_map(V::I64),
        3 => big_u64().prop_map(V::U64),
        1 => any::<f64>().prop_map(V::F64),
        3 => text().prop_map(V::Str),
        3 => prop::collection::vec(text(), 0..4).prop_map(V::Strs),
        2 => prop::collection::vec(env_entry(), 0..6).prop_map(V::Strs),
        2 => prop::collection::vec(small_u32(), 0..6).prop_map(V::U32s),
        1 => prop::collection::vec(any::<u64>(), 0..3).prop_map(V::U64s),
        1 => prop::collection::vec(any::<u8>(), 0..8).prop_map(V::Bytes),
        1 => prop::collection::vec(("[a-z]{0,4}", any::<u32>()), 0..3).prop_map(V::Dict),
    ];
    leaf.prop_recursive(2, 4, 1, |inner| inner.prop_map(|v| V::Nested(Box::new(v))))
}

/// A well-typed value for `key`, mostly in range, sometimes at an edge.
fn typed_value(key: &'static str) -> BoxedStrategy<V> {
    match key {
        "argv" => prop_oneof![
            4 => prop::collection::vec(text(), 1..4).prop_map(|mut v| {
                v[0] = format!("/bin/{}", v[0].trim_start_matches('/'));
                V::Strs(v)
            }),
            2 => prop::collection::vec(text(), 0..4).prop_map(V::Strs),
        ]
        .boxed(),
        "env" => prop::collection::vec(env_entry(), 0..8)
            .prop_map(V::Strs)
            .boxed(),
        "script" | "cwd" | "name" | "vendor" => text().prop_map(V::Str).boxed(),
        "cpus" | "gpus" => small_u32().prop_map(V::U32).boxed(),
        "mem" | "time_limit" => big_u64().prop_map(V::U64).boxed(),
        "device_ids" | "exclude_device_ids" => prop_oneof![
            4 => prop::collection::vec(0u32..6, 0..4).prop_map(V::U32s),
            1 => prop::collection::vec(small_u32(), 0..4).prop_map(V::U32s),
        ]
        .boxed(),
        _ => any::<bool>().prop_map(V::Bool).boxed(),
    }
}

/// One entry: a known key with a typed value, a known key with any value, a
/// hostile key, or a random one.
fn entry() -> impl Strategy<Value = (String, V)> {
    let known = (0..KEYS.len()).prop_flat_map(|i| {
        let k = KEYS[i].0;
        typed_value(k).prop_map(move |v| (k.to_string(), v))
    });
    prop_oneof![
        8 => known,
        2 => ((0..KEYS.len()), value()).prop_map(|(i, v)| (KEYS[i].0.to_string(), v)),
        1 => ((0..HOSTILE_KEYS.len()), value()).prop_map(|(i, v)| (HOSTILE_KEYS[i].to_string(), v)),
        1 => ("[a-zA-Z_]{0,10}", value()),
    ]
}

/// A spec: mostly with argv and cwd set well, so later checks are reached.
fn spec_entries() -> impl Strategy<Value = Vec<(String, V)>> {
    (
        any::<bool>(),
        prop_oneof![Just("/"), Just("/tmp"), Just("/usr")],
        prop::collection::vec(entry(), 0..8),
    )
        .prop_map(|(base, cwd, rest)| {
            let mut e = Vec::new();
            if base {
                e.push(("argv".to_string(), V::Strs(vec!["/bin/true".into()])));
                e.push(("cwd".to_string(), V::Str(cwd.into())));
            }
            e.extend(rest);
            e
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn random_specs_never_panic_and_accepted_ones_keep_the_bounds(entries in spec_entries()) {
        check(&to_map(&entries));
    }
}

/// The generator reaches all three outcomes, so the invariants are exercised.
#[test]
fn the_generator_reaches_every_verdict() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = spec_entries();
    let mut seen = [0usize; 3];
    for _ in 0..2000 {
        let e = strategy.new_tree(&mut runner).expect("tree").current();
        let i = match check(&to_map(&e)) {
            Verdict::BadSpec => 0,
            Verdict::BadRequest => 1,
            Verdict::Accepted => 2,
        };
        seen[i] += 1;
    }
    assert!(
        seen.iter().all(|n| *n >= 20),
        "verdicts (spec, request, accepted): {seen:?}"
    );
}

/// A submission, the verdict it must get and a text its refusal must contain.
type Case = (Vec<(String, V)>, Verdict, &'static str);

/// Hand-picked hostile submissions, each refused with a message naming the cause.
#[test]
fn hostile_submissions_are_refused_with_the_cause() {
    let base = invariants::good;
    let with = |k: &str, v: V| {
        let mut e = base();
        e.retain(|(key, _)| key != k);
        e.push((k.to_string(), v));
        e
    };
    let cases: Vec<Case> = vec![
        (
            with("user", V::Str("root".into())),
            Verdict::BadSpec,
            "unknown spec key \"user\"",
        ),
        (
            with("uid", V::U32(0)),
            Verdict::BadSpec,
            "unknown spec key \"uid\"",
        ),
        (
            with("unit", V::Str("sshd.service".into())),
            Verdict::BadSpec,
            "unknown spec key",
        ),
        (
            with("slice", V::Str("-.slice".into())),
            Verdict::BadSpec,
            "unknown spec key",
        ),
        (
            with("cpus", V::I32(-1)),
            Verdict::BadSpec,
            "must have type u",
        ),
        (
            with("cpus", V::Nested(Box::new(V::U32(1)))),
            Verdict::BadSpec,
            "must have type u",
        ),
        (
            with("mem", V::I64(-1)),
            Verdict::BadSpec,
            "must have type t",
        ),
        (
            with("argv", V::Str("/bin/true".into())),
            Verdict::BadSpec,
            "must have type as",
        ),
        (
            with("argv", V::Strs(vec![])),
            Verdict::BadSpec,
            "missing or empty",
        ),
        (
            with("cwd", V::Str("tmp".into())),
            Verdict::BadSpec,
            "not an absolute path",
        ),
        (
            with("cwd", V::Str("/nonexistent".into())),
            Verdict::BadSpec,
            "does not exist",
        ),
        (
            with("cwd", V::Str("/etc/passwd".into())),
            Verdict::BadSpec,
            "not a directory",
        ),
        (
            with("env", V::Strs(vec!["A B=1".into()])),
            Verdict::BadSpec,
            "NAME=VALUE",
        ),
        (
            with("env", V::Strs(vec!["=1".into()])),
            Verdict::BadSpec,
            "NAME=VALUE",
        ),
        (
            with("name", V::Str("x".repeat(201))),
            Verdict::BadSpec,
            "printable",
        ),
        (
            with("cpus", V::U32(0)),
            Verdict::BadRequest,
            "at least 1 CPU",
        ),
        (with("cpus", V::U32(u32::MAX)), Verdict::BadRequest, "CPUs"),
        (with("mem", V::U64(0)), Verdict::BadRequest, "0 bytes"),
        (with("mem", V::U64(u64::MAX)), Verdict::BadRequest, "memory"),
        (
            with("time_limit", V::U64(0)),
            Verdict::BadRequest,
            "0 seconds",
        ),
        (
            with("time_limit", V::U64(u64::MAX)),
            Verdict::BadRequest,
            "maximum job lifetime",
        ),
        (
            with("device_ids", V::U32s(vec![7])),
            Verdict::BadRequest,
            "device IDs 7",
        ),
        (
            with("device_ids", V::U32s(vec![3])),
            Verdict::BadRequest,
            "disabled",
        ),
        (
            with("device_ids", V::U32s(vec![0, 0])),
            Verdict::BadRequest,
            "twice",
        ),
        (
            with("gpus", V::U32(u32::MAX)),
            Verdict::BadRequest,
            "devices",
        ),
    ];
    for (entries, want, text) in cases {
        let map = to_map(&entries);
        assert_eq!(check(&map), want, "{entries:?}");
        let msg = match spec::parse(&map) {
            Err(e) => e.to_string(),
            Ok(s) => match xlurm::daemon::as_user::dir_problem_here(&s.cwd) {
                Some(problem) => problem,
                None => xlurm::core::request::validate(
                    &s.request,
                    &invariants::machine(),
                    &invariants::limits(),
                )
                .expect_err("refused")
                .to_string(),
            },
        };
        assert!(msg.contains(text), "{msg:?} lacks {text:?}");
    }
}
