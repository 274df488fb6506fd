//! A private `dbus-daemon` for tests, killed on drop.

use anyhow::{Context, Result};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

pub struct PrivateBus {
    child: Child,
    pub address: String,
    _dir: tempfile::TempDir,
}

impl PrivateBus {
    pub fn start() -> Result<PrivateBus> {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("bus.conf");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:dir={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
  <limit name="max_replies_per_connection">1000000</limit>
  <limit name="max_incoming_bytes">1000000000</limit>
  <limit name="max_outgoing_bytes">1000000000</limit>
  <limit name="max_message_size">256000000</limit>
</busconfig>
"#,
                dir.path().display()
            ),
        )?;
        let mut child = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting dbus-daemon (apt-get install dbus)")?;
        let stdout = child.stdout.take().context("dbus-daemon stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let address = line.trim().to_string();
        anyhow::ensure!(!address.is_empty(), "dbus-daemon printed no address");
        Ok(PrivateBus {
            child,
            address,
            _dir: dir,
        })
    }

    /// A connection to the bus. Its method calls time out after a minute,
    /// so a test whose daemon stops answering fails naming the call
    /// instead of hanging the whole run.
    pub async fn connect(&self) -> Result<zbus::Connection> {
        let conn = zbus::connection::Builder::address(self.address.as_str())
            .method_timeout(std::time::Duration::from_secs(60))
            .build()
            .await
            .context("connecting to the private bus")?;
        Ok(conn)
    }
}

impl PrivateBus {
    /// Kills the bus: every connection to it is closed.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        self.kill();
    }
}
