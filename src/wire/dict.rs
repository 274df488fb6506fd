//! The `a{sv}` dictionary both sides of the bus use for extensible replies
//! and arguments (`GetJob`, `GetMachine`, `GetUsage`, a spec, a filter).

use std::collections::HashMap;
use zbus::{OwnedVariant, Variant};

/// An `a{sv}`, keyed by name.
pub type Dict = HashMap<String, OwnedVariant>;

/// Puts `v` under `key` (a value that cannot be owned, a descriptor that
/// cannot be duplicated, is left out).
pub fn put<'a>(m: &mut Dict, key: &str, v: impl Into<Variant<'a>>) {
    if let Ok(v) = OwnedVariant::try_from(v.into()) {
        m.insert(key.to_string(), v);
    }
}

/// The value under `key`, if there is one of type `T`.
pub fn get<T: TryFrom<OwnedVariant>>(m: &Dict, key: &str) -> Option<T> {
    m.get(key)
        .and_then(|v| v.try_clone().ok())
        .and_then(|v| T::try_from(v).ok())
}
