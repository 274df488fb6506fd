//! The objects xlurmd serves, and the dispatch of every method call to them.
//!
//! zbus's `ObjectServer` keeps a tree node per registered object, with its own
//! copies of the standard interfaces: about 1 KiB per object, which with one
//! object per job was as much as the rest of a pending job (issue 21). So,
//! like systemd's units (sd-bus fallback vtables), job objects are not
//! registered anywhere: a call to `/org/xlurm/Scheduler1/job/<id>` is answered
//! from the job table, while that job is in it in full (pending, running or
//! ended less than `object_linger` ago) and the queue is public. Scheduler1 is
//! dispatched here as well, as one connection cannot both run its own
//! dispatch and zbus's (both would answer every call).
//!
//! The interfaces themselves are still zbus `#[interface]` impls: this module
//! only finds the object and hands it the call, `Properties` and
//! `Introspectable` included. zbus passes each call an `ObjectServer`; xlurm's
//! interfaces never use it, so they get that of an in-process peer connection
//! on which nothing is served. Never call `object_server()` on the bus
//! connection: zbus would start answering calls too (including the
//! `<Property>_changed` helpers the interface macro generates).

use crate::core::JobId;
use crate::daemon::bus::api::{SchedulerApi, PATH};
use crate::daemon::bus::in_flight::{Admitted, InFlight};
use crate::daemon::bus::job_object::JobObject;
use crate::daemon::service::Daemon;
use crate::wire::error::ApiError;
use futures_util::StreamExt;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use zbus::message::{Header, Type};
use zbus::object_server::{DispatchResult, Interface, SignalEmitter};
use zbus::{fdo, Connection, Message, MessageStream, ObjectServer, OwnedVariant};

/// The path under which job objects live.
const JOBS: &str = "/org/xlurm/Scheduler1/job";
pub const SCHEDULER1: &str = "org.xlurm.Scheduler1";
pub const JOB1: &str = "org.xlurm.Job1";
const PEER: &str = "org.freedesktop.DBus.Peer";
const INTROSPECTABLE: &str = "org.freedesktop.DBus.Introspectable";
const PROPERTIES: &str = "org.freedesktop.DBus.Properties";

/// What xlurmd serves on its bus connection.
pub struct Objects {
    conn: Connection,
    /// The peer connection whose `ObjectServer` the interfaces are handed,
    /// and its other end.
    holder: (Connection, Connection),
    api: SchedulerApi,
    daemon: Arc<Daemon>,
    /// Whether jobs have objects (a public queue: see `audience`).
    publish: bool,
    /// The calls being answered, per connection and per user.
    in_flight: Arc<InFlight>,
    /// Introspections of the job branch being written at once: each lists
    /// every job, so a few at a time.
    listings: Arc<tokio::sync::Semaphore>,
}

/// Introspections of the job branch written at once.
const LISTINGS: usize = 4;

/// The object at a path.
enum Object {
    Scheduler,
    Job(JobObject),
    /// A path on the way to the objects: only Introspectable (and Peer).
    Branch(&'static str),
    /// The branch the job objects are on, with the IDs of its children (and
    /// the turn taken to list them).
    Jobs {
        ids: Vec<JobId>,
        _turn: tokio::sync::OwnedSemaphorePermit,
    },
}

impl Objects {
    /// Serves `api` at `/org/xlurm/Scheduler1` and, when `publish`, every job
    /// in the table at `/org/xlurm/Scheduler1/job/<id>`. Set up before the bus
    /// name is requested, so no call to it is missed.
    pub async fn serve(
        conn: &Connection,
        api: SchedulerApi,
        publish: bool,
    ) -> zbus::Result<tokio::task::JoinHandle<()>> {
        let holder = idle_peer().await?;
        let daemon = api.daemon.clone();
        let objects = Arc::new(Objects {
            conn: conn.clone(),
            holder,
            api,
            daemon,
            publish,
            in_flight: Arc::default(),
            listings: Arc::new(tokio::sync::Semaphore::new(LISTINGS)),
        });
        let mut rule = zbus::MatchRule::builder().msg_type(Type::MethodCall);
        if let Some(name) = conn.unique_name() {
            rule = rule.destination(name.as_ref());
        }
        let mut calls = MessageStream::for_match_rule(rule.build()?, conn, None).await?;
        Ok(tokio::spawn(async move {
            while let Some(msg) = calls.next().await {
                let Ok(msg) = msg else { continue };
                let objects = objects.clone();
                tokio::spawn(async move { objects.dispatch(&msg).await });
            }
        }))
    }

    async fn dispatch(&self, msg: &Message) {
        let hdr = msg.header();
        // The call counts as in flight until its arm ends, answer made.
        let answered = match self.admit(&hdr).await {
            Ok(_admitted) => self.try_dispatch(msg, &hdr).await,
            Err(e) => Err(e),
        };
        if let Err(e) = answered {
            if let Err(e) = self.conn.reply_dbus_error(&hdr, e).await {
                tracing::debug!("replying to {msg}: {e}");
            }
        }
    }

    /// Counts the call against its connection's and its user's calls in
    /// flight (`in_flight`), or refuses it.
    async fn admit(&self, hdr: &Header<'_>) -> Result<[Admitted; 2], zbus::BoxDBusError> {
        let limit = |why: String| -> zbus::BoxDBusError { Box::new(ApiError::LimitExceeded(why)) };
        let sender = hdr.sender().map(|s| s.as_str()).unwrap_or_default();
        let connection = self.in_flight.from_connection(sender).map_err(limit)?;
        let uid = self
            .api
            .caller(&self.conn, hdr)
            .await
            .map_err(|e| -> zbus::BoxDBusError { Box::new(e) })?;
        let user = self.in_flight.from_user(uid).map_err(limit)?;
        Ok([connection, user])
    }

    async fn try_dispatch(
        &self,
        msg: &Message,
        hdr: &Header<'_>,
    ) -> Result<(), zbus::BoxDBusError> {
        let (Some(path), Some(member)) = (hdr.path(), hdr.member()) else {
            return Err(failed("the call has no object path or member"));
        };
        let Some(iface) = hdr.interface() else {
            return Err(failed("the call names no interface: xlurmd needs one"));
        };
        let server = self.holder.0.object_server();
        // Peer answers on any path (D-Bus specification).
        if iface.as_str() == PEER {
            return match member.as_str() {
                "Ping" => Ok(self.conn.reply(hdr, &()).await?),
                "GetMachineId" => {
                    let id = std::fs::read_to_string("/etc/machine-id")
                        .map_err(|e| failed(&format!("cannot read /etc/machine-id: {e}")))?;
                    Ok(self.conn.reply(hdr, &id.trim()).await?)
                }
                _ => Err(unknown_method(member.as_str())),
            };
        }
        let object = self.object_at(path.as_str()).await.ok_or_else(|| {
            boxed(fdo::Error::UnknownObject(format!(
                "Unknown object '{path}'"
            )))
        })?;
        let emitter = SignalEmitter::new(&self.conn, path.to_owned())?;
        match iface.as_str() {
            INTROSPECTABLE if member.as_str() == "Introspect" => {
                let xml = self.introspect(&object);
                Ok(self.conn.reply(hdr, &xml).await?)
            }
            INTROSPECTABLE => Err(unknown_method(member.as_str())),
            PROPERTIES => {
                self.properties(&object, msg, hdr, member.as_str(), server, &emitter)
                    .await
            }
            name => {
                let Some((_, target)) = self.interface(&object).filter(|(n, _)| *n == name) else {
                    return Err(boxed(fdo::Error::UnknownInterface(format!(
                        "Unknown interface '{name}'"
                    ))));
                };
                match target.call(server, &self.conn, msg, member.clone()) {
                    DispatchResult::Async(f) => f.await,
                    // xlurm's interfaces have no `&mut self` methods.
                    DispatchResult::NotFound | DispatchResult::RequiresMut => {
                        Err(unknown_method(member.as_str()))
                    }
                }
            }
        }
    }

    /// The interface `object` serves besides the standard ones, by name.
    fn interface<'a>(&'a self, object: &'a Object) -> Option<(&'static str, &'a dyn Interface)> {
        match object {
            Object::Scheduler => Some((SCHEDULER1, &self.api)),
            Object::Job(j) => Some((JOB1, j)),
            Object::Branch(_) | Object::Jobs { .. } => None,
        }
    }

    /// The object at `path`, if there is one now.
    async fn object_at(&self, path: &str) -> Option<Object> {
        match path {
            "/" => Some(Object::Branch("org")),
            "/org" => Some(Object::Branch("xlurm")),
            "/org/xlurm" => Some(Object::Branch("Scheduler1")),
            PATH => Some(Object::Scheduler),
            JOBS if self.publish => {
                let turn = self.listings.clone().acquire_owned().await.ok()?;
                Some(Object::Jobs {
                    ids: self.job_ids().await,
                    _turn: turn,
                })
            }
            _ if self.publish => {
                let id = job_id(path.strip_prefix(JOBS)?.strip_prefix('/')?)?;
                self.daemon
                    .state
                    .lock()
                    .await
                    .jobs
                    .contains_key(&id)
                    .then(|| {
                        Object::Job(JobObject {
                            daemon: self.daemon.clone(),
                            id,
                        })
                    })
            }
            _ => None,
        }
    }

    /// The IDs of the jobs that have objects, in order.
    async fn job_ids(&self) -> Vec<JobId> {
        let mut ids: Vec<JobId> = self
            .daemon
            .state
            .lock()
            .await
            .jobs
            .keys()
            .copied()
            .collect();
        ids.sort_unstable();
        ids
    }

    fn introspect(&self, object: &Object) -> String {
        let mut xml = String::from(concat!(
            "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n",
            " \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n",
            "<node>\n",
        ));
        xml.push_str(STANDARD_INTERFACES);
        if let Some((_, i)) = self.interface(object) {
            i.introspect_to_writer(&mut xml, 2);
        }
        match object {
            Object::Branch(child) => child_node(&mut xml, child),
            Object::Scheduler if self.publish => child_node(&mut xml, "job"),
            Object::Jobs { ids, .. } => {
                xml.reserve(ids.len() * 24);
                for id in ids {
                    child_node(&mut xml, id);
                }
            }
            _ => {}
        }
        xml.push_str("</node>\n");
        xml
    }

    /// org.freedesktop.DBus.Properties on `object`: every property is read-only.
    async fn properties(
        &self,
        object: &Object,
        msg: &Message,
        hdr: &Header<'_>,
        member: &str,
        server: &ObjectServer,
        emitter: &SignalEmitter<'_>,
    ) -> Result<(), zbus::BoxDBusError> {
        let body = msg.body();
        let (iface, property): (String, Option<String>) = match member {
            "Get" | "Set" => {
                let (i, p) = match member {
                    "Get" => body.deserialize::<(String, String)>(),
                    _ => body
                        .deserialize::<(String, String, zbus::Variant<'_>)>()
                        .map(|(i, p, _)| (i, p)),
                }
                .map_err(|e| boxed(fdo::Error::InvalidArgs(e.to_string())))?;
                (i, Some(p))
            }
            "GetAll" => (
                body.deserialize::<String>()
                    .map_err(|e| boxed(fdo::Error::InvalidArgs(e.to_string())))?,
                None,
            ),
            other => return Err(unknown_method(other)),
        };
        let Some((_, target)) = self.interface(object).filter(|(n, _)| *n == iface) else {
            // The standard interfaces have no properties.
            if [PEER, INTROSPECTABLE, PROPERTIES].contains(&iface.as_str()) && member == "GetAll" {
                return Ok(self
                    .conn
                    .reply(hdr, &HashMap::<String, OwnedVariant>::new())
                    .await?);
            }
            return Err(boxed(fdo::Error::UnknownInterface(format!(
                "Unknown interface '{iface}'"
            ))));
        };
        let Some(property) = property else {
            let all = target
                .get_all(server, &self.conn, Some(hdr), emitter)
                .await
                .map_err(boxed)?;
            return Ok(self.conn.reply(hdr, &all).await?);
        };
        let value = target
            .get(&property, server, &self.conn, Some(hdr), emitter)
            .await;
        match (member, value) {
            (_, None) => Err(boxed(fdo::Error::UnknownProperty(format!(
                "Unknown property '{property}'"
            )))),
            ("Get", Some(Ok(v))) => Ok(self.conn.reply(hdr, &v).await?),
            ("Get", Some(Err(e))) => Err(e),
            _ => Err(boxed(fdo::Error::PropertyReadOnly(format!(
                "Property '{property}' is read-only"
            )))),
        }
    }
}

/// PropertiesChanged of `interface` on `emitter`'s object, sent directly
/// (not with the `<Property>_changed` helpers the interface macro generates:
/// they start zbus's own object server on the connection, see above).
pub async fn properties_changed(
    emitter: &SignalEmitter<'_>,
    interface: &'static str,
    changed: HashMap<&str, zbus::Variant<'_>>,
    invalidated: &[&str],
) {
    let _ = fdo::Properties::properties_changed(
        emitter,
        zbus::names::InterfaceName::from_static_str_unchecked(interface),
        changed,
        std::borrow::Cow::Borrowed(invalidated),
    )
    .await;
}

fn child_node(xml: &mut String, name: impl std::fmt::Display) {
    let _ = writeln!(xml, "  <node name=\"{name}\"/>");
}

/// A job's ID as its path names it: digits only, no leading zero, so each job
/// has one path.
fn job_id(s: &str) -> Option<JobId> {
    let id: JobId = s.parse().ok()?;
    (id.to_string() == s).then_some(id)
}

fn boxed(e: fdo::Error) -> zbus::BoxDBusError {
    Box::new(e)
}

fn failed(what: &str) -> zbus::BoxDBusError {
    boxed(fdo::Error::Failed(what.to_string()))
}

fn unknown_method(member: &str) -> zbus::BoxDBusError {
    boxed(fdo::Error::UnknownMethod(format!(
        "Unknown method '{member}'"
    )))
}

/// An in-process peer connection on which nothing is served: its
/// `ObjectServer` is the one interface calls are handed.
async fn idle_peer() -> zbus::Result<(Connection, Connection)> {
    let io = |e: std::io::Error| zbus::Error::InputOutput(Arc::new(e));
    let (a, b) = std::os::unix::net::UnixStream::pair().map_err(io)?;
    a.set_nonblocking(true).map_err(io)?;
    b.set_nonblocking(true).map_err(io)?;
    let guid = zbus::Guid::generate();
    let server = zbus::connection::Builder::unix_stream(a)
        .server(guid)
        .p2p()
        .build();
    let client = zbus::connection::Builder::unix_stream(b).p2p().build();
    tokio::try_join!(server, client)
}

/// The standard interfaces every object has, as introspection shows them.
const STANDARD_INTERFACES: &str = r#"  <interface name="org.freedesktop.DBus.Peer">
    <method name="Ping">
    </method>
    <method name="GetMachineId">
      <arg type="s" direction="out"/>
    </method>
  </interface>
  <interface name="org.freedesktop.DBus.Introspectable">
    <method name="Introspect">
      <arg type="s" direction="out"/>
    </method>
  </interface>
  <interface name="org.freedesktop.DBus.Properties">
    <method name="Get">
      <arg name="interface_name" type="s" direction="in"/>
      <arg name="property_name" type="s" direction="in"/>
      <arg type="v" direction="out"/>
    </method>
    <method name="Set">
      <arg name="interface_name" type="s" direction="in"/>
      <arg name="property_name" type="s" direction="in"/>
      <arg name="value" type="v" direction="in"/>
    </method>
    <method name="GetAll">
      <arg name="interface_name" type="s" direction="in"/>
      <arg type="a{sv}" direction="out"/>
    </method>
    <signal name="PropertiesChanged">
      <arg name="interface_name" type="s"/>
      <arg name="changed_properties" type="a{sv}"/>
      <arg name="invalidated_properties" type="as"/>
    </signal>
  </interface>
"#;
