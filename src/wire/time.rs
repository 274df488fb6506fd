//! Times on the bus are microseconds since the epoch; 0 means "not yet".

/// Now, in microseconds since the epoch.
pub fn now_usec() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}
