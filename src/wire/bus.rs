//! What counts as the other side of the bus being briefly away: the daemon
//! asks it of systemd's answers, the CLI of xlurmd's.

/// Whether a D-Bus error means the peer (or the bus) was briefly away, not
/// that it refused the request.
pub fn transient(e: &zbus::Error) -> bool {
    match e {
        zbus::Error::MethodError(name, _, _) => matches!(
            name.as_str(),
            "org.freedesktop.DBus.Error.NoReply"
                | "org.freedesktop.DBus.Error.Disconnected"
                | "org.freedesktop.DBus.Error.ServiceUnknown"
                | "org.freedesktop.DBus.Error.NameHasNoOwner"
                | "org.freedesktop.DBus.Error.Timeout"
                | "org.freedesktop.DBus.Error.TimedOut"
        ),
        // zbus turns the bus's own errors into fdo::Error.
        zbus::Error::FDO(f) => matches!(
            **f,
            zbus::fdo::Error::NoReply(_)
                | zbus::fdo::Error::Disconnected(_)
                | zbus::fdo::Error::ServiceUnknown(_)
                | zbus::fdo::Error::NameHasNoOwner(_)
                | zbus::fdo::Error::Timeout(_)
                | zbus::fdo::Error::TimedOut(_)
        ),
        zbus::Error::InputOutput(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::transient;

    #[test]
    fn systemd_going_away_is_transient_and_refusals_are_not() {
        let no_reply = zbus::Error::FDO(Box::new(zbus::fdo::Error::NoReply(
            "recipient disconnected".into(),
        )));
        assert!(transient(&no_reply));
        let gone = zbus::Error::FDO(Box::new(zbus::fdo::Error::ServiceUnknown("x".into())));
        assert!(transient(&gone));
        let refused = zbus::Error::FDO(Box::new(zbus::fdo::Error::InvalidArgs(
            "bad property".into(),
        )));
        assert!(!transient(&refused));
    }
}
