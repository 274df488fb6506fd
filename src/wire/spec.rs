//! A submission's spec as it crosses the bus: an `a{sv}` whose keys and
//! types are these. The daemon checks it (`daemon::spec`); clients build it
//! with [`entry`].

use zbus::{OwnedVariant, Variant};

/// The keys a spec may hold, with their D-Bus types.
pub const KEYS: [(&str, &str); 24] = [
    ("argv", "as"),
    ("script", "s"),
    ("cwd", "s"),
    ("env", "as"),
    ("name", "s"),
    ("cpus", "u"),
    ("mem", "t"),
    ("gpus", "u"),
    ("gpus_default", "b"),
    ("vendor", "s"),
    ("device_ids", "au"),
    ("exclude_device_ids", "au"),
    ("exclusive", "b"),
    ("numa_local", "b"),
    ("time_limit", "t"),
    ("clean_env", "b"),
    ("nice", "i"),
    ("hold", "b"),
    ("dependency", "s"),
    ("kill_on_invalid_dep", "b"),
    ("requeue", "b"),
    ("array", "s"),
    ("output_template", "s"),
    ("umask", "u"),
];

/// Whether systemd accepts `name` as an environment variable name.
pub fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Builds a spec map from typed values (for clients and tests).
pub fn entry<'a, V: Into<Variant<'a>>>(key: &str, v: V) -> (String, OwnedVariant) {
    let v: Variant<'a> = v.into();
    (
        key.to_string(),
        OwnedVariant::try_from(v).unwrap_or_else(|_| OwnedVariant::from(0u8)),
    )
}
