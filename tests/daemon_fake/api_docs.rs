//! The documented API is the served one: `dbus/*.xml`, the README's D-Bus
//! section and `docs/json.md`, checked against the running daemon.

use super::*;

/// The `<interface name="...">` block of an introspection document, whitespace-trimmed per line.
fn interface_block(xml: &str, name: &str) -> String {
    let start = format!("<interface name=\"{name}\">");
    let mut out = Vec::new();
    let mut inside = false;
    for line in xml.lines().map(str::trim) {
        if line == start {
            inside = true;
        }
        if inside {
            out.push(line.to_string());
            if line == "</interface>" {
                break;
            }
        }
    }
    out.join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_interface_matches_dbus_xml() {
    let e = env(Mode::Instant).await;
    let (_d, _c) = daemon(&e).await;
    let conn = e.bus.connect().await.unwrap();
    let intro = zbus::fdo::IntrospectableProxy::builder(&conn)
        .destination("org.xlurm.Scheduler1")
        .path("/org/xlurm/Scheduler1")
        .build()
        .await
        .unwrap();
    let live = interface_block(&intro.introspect().await.unwrap(), "org.xlurm.Scheduler1");
    assert!(live.contains("<method name=\"Submit\">"), "{live}");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/dbus/org.xlurm.Scheduler1.xml");
    if std::env::var_os("XLURM_BLESS").is_some() {
        let doc = format!(
            "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n<!-- org.xlurm.Scheduler1 at /org/xlurm/Scheduler1. Generated from the running daemon\n     (XLURM_BLESS=1 cargo test --test daemon_fake the_served_interface); checked by that\n     test and by the VM scenario 10-xlurmd-jobs. The README documents each method. -->\n<node>\n{}\n</node>\n",
            live.lines().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
        );
        std::fs::write(path, doc).unwrap();
    }
    let doc = std::fs::read_to_string(path).expect("dbus/org.xlurm.Scheduler1.xml exists");
    assert_eq!(
        interface_block(&doc, "org.xlurm.Scheduler1"),
        live,
        "dbus/org.xlurm.Scheduler1.xml is out of date: rerun with XLURM_BLESS=1"
    );

    // org.xlurm.Job1 on a job's object.
    let c = client(&e).await;
    let (id, _) = c.submit(spec(&["/bin/true"])).await.unwrap();
    let job_path = format!("/org/xlurm/Scheduler1/job/{id}");
    let intro = zbus::fdo::IntrospectableProxy::builder(&conn)
        .destination("org.xlurm.Scheduler1")
        .path(job_path.as_str())
        .build()
        .await
        .unwrap();
    let live = interface_block(&intro.introspect().await.unwrap(), "org.xlurm.Job1");
    assert!(live.contains("<property name=\"State\""), "{live}");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/dbus/org.xlurm.Job1.xml");
    if std::env::var_os("XLURM_BLESS").is_some() {
        let doc = format!(
            "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n<!-- org.xlurm.Job1 at /org/xlurm/Scheduler1/job/ID. Generated from the running daemon\n     (XLURM_BLESS=1 cargo test --test daemon_fake the_served_interface) and checked by that test. -->\n<node>\n{}\n</node>\n",
            live.lines().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
        );
        std::fs::write(path, doc).unwrap();
    }
    let doc = std::fs::read_to_string(path).expect("dbus/org.xlurm.Job1.xml exists");
    assert_eq!(
        interface_block(&doc, "org.xlurm.Job1"),
        live,
        "dbus/org.xlurm.Job1.xml is out of date: rerun with XLURM_BLESS=1"
    );
}

/// What an interface in an introspection document declares.
#[derive(Debug, Default)]
struct Members {
    /// `(name, in types, out types)`.
    methods: Vec<(String, String, String)>,
    /// `(name, argument types)`.
    signals: Vec<(String, String)>,
    properties: Vec<String>,
}

/// The members of the first interface in an introspection document.
fn xml_members(xml: &str) -> Members {
    let attr = |line: &str, key: &str| {
        line.split(&format!(" {key}=\""))
            .nth(1)
            .and_then(|r| r.split('"').next())
            .map(str::to_string)
    };
    let mut m = Members::default();
    // Where the `<arg>`s seen go: the last method, or the last signal.
    let mut in_signal = false;
    for line in xml.lines().map(str::trim) {
        let name = || attr(line, "name").unwrap_or_default();
        if line.starts_with("<method ") {
            m.methods.push((name(), String::new(), String::new()));
            in_signal = false;
        } else if line.starts_with("<signal ") {
            m.signals.push((name(), String::new()));
            in_signal = true;
        } else if line.starts_with("<property ") {
            m.properties.push(name());
        } else if line.starts_with("<arg ") {
            let t = attr(line, "type").unwrap_or_default();
            if in_signal {
                if let Some(sig) = m.signals.last_mut() {
                    sig.1.push_str(&t);
                }
            } else if let Some(meth) = m.methods.last_mut() {
                if attr(line, "direction").as_deref() == Some("out") {
                    meth.2.push_str(&t);
                } else {
                    meth.1.push_str(&t);
                }
            }
        } else if line.starts_with("</interface>") {
            break;
        }
    }
    m
}

/// The D-Bus API section of the README, as the Scheduler1 part and the Job1
/// bullet ("- One object per job ...").
fn readme_dbus_parts() -> (String, String) {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let start = readme
        .find("\n## D-Bus API")
        .expect("README has a D-Bus API section");
    let rest = &readme[start + 1..];
    let section = &rest[..rest[1..].find("\n## ").map_or(rest.len(), |i| i + 1)];
    let job_at = section
        .find("\n- One object per job")
        .expect("README's D-Bus API describes the job objects");
    let job_end = section[job_at + 1..]
        .find("\n- ")
        .map_or(section.len(), |i| job_at + 1 + i);
    let job = section[job_at..job_end].to_string();
    let scheduler = format!("{}{}", &section[..job_at], &section[job_end..]);
    (scheduler, job)
}

/// Each "`Name(...)`" in README text: `(name, what follows "Name(" up to the
/// closing backtick, whether the word before it is "signal")`.
fn readme_calls(text: &str) -> Vec<(String, String, bool)> {
    let parts: Vec<&str> = text.split('`').collect();
    let mut out = Vec::new();
    for (k, code) in parts.iter().enumerate().skip(1).step_by(2) {
        let Some((name, shown)) = code.split_once('(') else {
            continue;
        };
        if !name.starts_with(|c: char| c.is_ascii_uppercase())
            || !name.chars().all(|c| c.is_ascii_alphanumeric())
        {
            continue;
        }
        let signal = parts[k - 1]
            .trim_end()
            .to_ascii_lowercase()
            .ends_with("signal");
        out.push((name.to_string(), shown.to_string(), signal));
    }
    out
}

/// The types of a signature as the README shows it after "Name(":
/// "t id, s x) -> (t id, a{sv} info)" -> ("ts", "ta{sv}").
fn readme_signature(shown: &str) -> (String, String) {
    let (args, ret) = shown.split_once(" -> ").unwrap_or((shown, ""));
    let args = args.strip_suffix(')').unwrap_or(args);
    // "t id, a{sv} info" -> "ta{sv}"; a lone word is a type ("s", "aa{sv}").
    let types = |s: &str| -> String {
        s.split(',')
            .filter_map(|p| p.split_whitespace().next())
            .collect()
    };
    let ret = match ret.strip_prefix('(') {
        Some(r) => r.strip_suffix(')').unwrap_or(r),
        None => ret,
    };
    (types(args), types(ret))
}

/// The backticked names in the list after "properties " in README text
/// ("properties `A`, `B`, `C`." or "... `C`, with ...").
fn readme_properties(text: &str) -> Vec<String> {
    let Some(at) = text.find("properties ") else {
        return Vec::new();
    };
    let mut rest = &text[at + "properties ".len()..];
    let mut names = Vec::new();
    loop {
        rest = rest.trim_start_matches(|c: char| c == ',' || c.is_whitespace());
        let Some(r) = rest.strip_prefix('`') else {
            break;
        };
        let Some(end) = r.find('`') else { break };
        names.push(r[..end].to_string());
        rest = &r[end + 1..];
    }
    names
}

/// Both ways: what the README shows is what there is, once each.
fn same_names(what: &str, readme: &[String], actual: &[String]) {
    let missing: Vec<_> = actual.iter().filter(|n| !readme.contains(n)).collect();
    let extra: Vec<_> = readme.iter().filter(|n| !actual.contains(n)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "README's D-Bus API and {what} differ: not in the README: {missing:?}; \
         in the README but not in {what}: {extra:?}"
    );
    let mut once = readme.to_vec();
    once.sort();
    once.dedup();
    assert_eq!(
        once.len(),
        readme.len(),
        "README lists some of {what} twice: {readme:?}"
    );
}

#[test]
fn the_readme_documents_every_method_with_the_signature_it_has() {
    let (scheduler, job) = readme_dbus_parts();
    for (iface, text) in [
        ("org.xlurm.Scheduler1", &scheduler),
        ("org.xlurm.Job1", &job),
    ] {
        let path = format!("{}/dbus/{iface}.xml", env!("CARGO_MANIFEST_DIR"));
        let xml = std::fs::read_to_string(&path).unwrap();
        let methods = xml_members(&interface_block(&xml, iface)).methods;
        assert!(!methods.is_empty(), "{path}: no methods");
        let shown: Vec<(String, String)> = readme_calls(text)
            .into_iter()
            .filter(|(_, _, signal)| !signal)
            .map(|(n, s, _)| (n, s))
            .collect();
        // Both ways: every method is shown, and every method shown exists.
        same_names(
            &format!("{iface}'s methods"),
            &shown.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
            &methods.iter().map(|(n, ..)| n.clone()).collect::<Vec<_>>(),
        );
        for (name, ins, outs) in &methods {
            let (_, text) = shown.iter().find(|(n, _)| n == name).unwrap();
            let (args, ret) = readme_signature(text);
            assert_eq!(args, *ins, "README's {iface}.{name} arguments: {text}");
            assert_eq!(ret, *outs, "README's {iface}.{name} returns: {text}");
        }
    }
}

#[test]
fn the_readme_documents_every_property_signal_and_error() {
    let (scheduler, job) = readme_dbus_parts();
    for (iface, text, min_props) in [
        ("org.xlurm.Scheduler1", &scheduler, 3),
        ("org.xlurm.Job1", &job, 18),
    ] {
        let path = format!("{}/dbus/{iface}.xml", env!("CARGO_MANIFEST_DIR"));
        let xml = std::fs::read_to_string(&path).unwrap();
        let m = xml_members(&interface_block(&xml, iface));
        assert!(m.properties.len() >= min_props, "{path}: {m:?}");
        same_names(
            &format!("{iface}'s properties"),
            &readme_properties(text),
            &m.properties,
        );
        let signals: Vec<(String, String)> = readme_calls(text)
            .into_iter()
            .filter(|(_, _, signal)| *signal)
            .map(|(n, s, _)| (n, s))
            .collect();
        same_names(
            &format!("{iface}'s signals"),
            &signals.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
            &m.signals.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        );
        for (name, types) in &m.signals {
            let (_, text) = signals.iter().find(|(n, _)| n == name).unwrap();
            let (args, ret) = readme_signature(text);
            assert_eq!(
                (args.as_str(), ret.as_str()),
                (types.as_str(), ""),
                "README's {iface}.{name} signal: {text}"
            );
        }
    }
    assert!(
        scheduler.contains("Signal `JobStateChanged("),
        "the parts are split as expected"
    );

    // Errors: "`org.xlurm.Scheduler1.Error.{A, B, ...}`" against the daemon's.
    let prefix = "org.xlurm.Scheduler1.Error.{";
    let at = scheduler
        .find(prefix)
        .expect("README lists the errors as org.xlurm.Scheduler1.Error.{...}");
    let list = &scheduler[at + prefix.len()..];
    let list = &list[..list.find('}').expect("the error list ends with }")];
    let readme_errors: Vec<String> = list
        .split(',')
        .map(|n| format!("org.xlurm.Scheduler1.Error.{}", n.trim()))
        .collect();
    use xlurm::wire::error::ApiError as E;
    use zbus::DBusError;
    let all = [
        E::InvalidArgs(String::new()),
        E::InvalidRequest(String::new()),
        E::NoSuchJob(String::new()),
        E::PermissionDenied(String::new()),
        E::WrongState(String::new()),
        E::LimitExceeded(String::new()),
        E::Failed(String::new()),
    ];
    for e in &all {
        // Stops compiling when an error is added: add it to `all` (and the README).
        match e {
            E::ZBus(_)
            | E::InvalidArgs(_)
            | E::InvalidRequest(_)
            | E::NoSuchJob(_)
            | E::PermissionDenied(_)
            | E::WrongState(_)
            | E::LimitExceeded(_)
            | E::Failed(_) => {}
        }
    }
    let code_errors: Vec<String> = all.iter().map(|e| e.name().to_string()).collect();
    same_names("the daemon's errors", &readme_errors, &code_errors);
}

/// The keys of the tables under the `## ` heading starting with `heading` in
/// docs/json.md, one set per table.
fn documented_keys(doc: &str, heading: &str) -> Vec<std::collections::BTreeSet<String>> {
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with(heading))
        .unwrap_or_else(|| panic!("docs/json.md has no section {heading:?}"));
    let mut tables = Vec::new();
    let mut current = std::collections::BTreeSet::new();
    for line in section.lines() {
        if let Some(rest) = line.strip_prefix("| `") {
            current.insert(rest.split('`').next().unwrap().to_string());
        } else if !current.is_empty() && !line.starts_with('|') {
            tables.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        tables.push(current);
    }
    tables
}

fn keys(v: &serde_json::Value) -> std::collections::BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_schemas_in_docs_json_md_are_what_the_daemon_sends() {
    let mut e = env(Mode::Run).await;
    e.devices = one_gpu();
    let (d, conn) = daemon(&e).await;
    let c = client(&e).await;
    // Finished: one exited, one killed by a signal.
    let (exited, _) = c.submit(spec(&["/bin/sh", "-c", "exit 3"])).await.unwrap();
    let (killed, _) = c
        .submit(spec(&["/bin/sh", "-c", "kill -9 $$"]))
        .await
        .unwrap();
    wait_state(&c, exited, "FAILED").await;
    wait_state(&c, killed, "FAILED").await;
    // Running: all 4 CPUs and the GPU, which the polls (here: handed over
    // by the test) find idle for long enough: IdleGPU and its figures.
    // Pending behind it: an environment and an --output file.
    let mut s = spec(&["/bin/sleep", "60"]);
    s.extend([entry("cpus", 4u32), entry("gpus", 1u32)]);
    let (running, _) = c.submit(s).await.unwrap();
    wait_state(&c, running, "RUNNING").await;
    // The fake backend's polls find the GPU idle; the rule here flags it
    // after a second.
    let idle_gpu = async |c: &SchedulerProxy<'_>| {
        let t0 = Instant::now();
        while get_str(&c.get_job(running).await.unwrap(), "flag") != "IdleGPU" {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "never flagged IdleGPU"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    idle_gpu(&c).await;
    let mut seen_job = std::collections::BTreeSet::new();
    seen_job.extend(keys(&cli_json(
        &e,
        &["queue", &running.to_string(), "--json"],
    )));
    let dir = tempfile::tempdir().unwrap();
    let file = std::fs::File::create(dir.path().join("out")).unwrap();
    let mut s = spec(&["/bin/true"]);
    s.extend([entry("env", vec!["X=1".to_string()])]);
    s.insert(
        "output_fd".into(),
        zbus::OwnedVariant::try_from(zbus::Variant::Fd(zbus::Fd::from(&file))).unwrap(),
    );
    let (pending, _) = c.submit(s).await.unwrap();
    seen_job.extend(keys(&cli_json(
        &e,
        &["queue", &pending.to_string(), "--json"],
    )));
    // Held, with a dependency: then cancelled.
    let mut s = spec(&["/bin/true"]);
    s.extend([
        entry("hold", true),
        entry("dependency", format!("afterany:{running}")),
        entry("kill_on_invalid_dep", true),
        entry("array", "1-4%2"),
    ]);
    let (held, _) = c.submit(s).await.unwrap();
    seen_job.extend(keys(&cli_json(&e, &["queue", &held.to_string(), "--json"])));
    c.cancel(held).await.unwrap();
    // A restart while it waits loses its --output descriptor (outside systemd
    // there is no descriptor store): once it runs it says so in output_error.
    drop(d);
    conn.release_name("org.xlurm.Scheduler1").await.unwrap();
    drop(conn);
    let (_d2, _c2) = daemon(&e).await;
    // A running job's load samples are kept in memory only: the restarted
    // daemon's polls give it new ones (its usage row has gpu_util from them;
    // a cancel before the first poll left none on a loaded machine).
    idle_gpu(&c).await;
    c.cancel(running).await.unwrap();
    let job = wait_state(&c, pending, "COMPLETED").await;
    assert!(
        get_str(&job, "output_error").contains("lost when xlurmd restarted"),
        "{job:?}"
    );

    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/json.md")).unwrap();
    for id in [exited, killed, running, pending] {
        seen_job.extend(keys(&cli_json(&e, &["queue", &id.to_string(), "--json"])));
    }
    assert_eq!(
        seen_job,
        documented_keys(&doc, "`xqueue ID --json`")[0],
        "docs/json.md (xqueue ID --json) vs GetJob"
    );
    let list = cli_json(&e, &["queue", "--all", "--json"]);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 5);
    for item in list {
        assert_eq!(
            keys(item),
            documented_keys(&doc, "`xqueue --json`")[0],
            "docs/json.md (xqueue --json) vs ListJobs"
        );
    }
    // A limit for everyone, so that the caller's `limits` has an entry.
    client(&e)
        .await
        .set_user_limits(r#"{"default": {"running_jobs": 100}}"#)
        .await
        .unwrap();
    // The restarted daemon's first poll gives the device its load.
    let t0 = Instant::now();
    while cli_json(&e, &["info", "--json"])["devices"][0]["util_pct"].is_null() {
        assert!(t0.elapsed() < Duration::from_secs(20), "no device load");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let info = cli_json(&e, &["info", "--json"]);
    let tables = documented_keys(&doc, "`xinfo --json`");
    assert_eq!(
        tables.len(),
        4,
        "xinfo: the machine, nodes, devices, limits"
    );
    assert_eq!(keys(&info["limits"][0]), tables[3], "docs/json.md: limits");
    assert_eq!(
        keys(&info),
        tables[0],
        "docs/json.md (xinfo --json) vs GetMachine"
    );
    assert_eq!(keys(&info["nodes"][0]), tables[1], "docs/json.md: nodes");
    assert_eq!(
        keys(&info["devices"][0]),
        tables[2],
        "docs/json.md: devices"
    );

    // The accounting log has every job that ended here, across the restart:
    // 2 FAILED, the running one and the held array CANCELLED, 1 COMPLETED.
    let rows = cli_json(&e, &["usage", "--json"]);
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 1, "one user, one day: {rows:?}");
    let row = &rows[0];
    assert_eq!(row["jobs"], 5, "{row}");
    assert_eq!(row["states"]["FAILED"], 2, "{row}");
    assert_eq!(row["states"]["CANCELLED"], 2, "{row}");
    assert_eq!(row["states"]["COMPLETED"], 1, "{row}");
    assert!(row["gpu_hours"].as_f64().unwrap() > 0.0, "{row}");
    let documented = documented_keys(&doc, "`xlurm usage --json`")[0].clone();
    let seen = keys(row);
    assert!(
        seen.is_subset(&documented),
        "undocumented: {seen:?} vs {documented:?}"
    );
    for k in [
        "period",
        "uid",
        "user",
        "jobs",
        "states",
        "cpu_hours",
        "gpu_hours",
        "wait_median",
        "gpu_util",
    ] {
        assert!(seen.contains(k), "{k} missing from {row}");
    }
    // A window with none of them: no rows; a bad option: a named error.
    let none = cli_json(
        &e,
        &[
            "usage",
            "--json",
            "--until",
            "2000-01-01",
            "--since",
            "1999-01-01",
        ],
    );
    assert_eq!(none.as_array().unwrap().len(), 0);
    let out = cli(&e, ["usage", "--since", "yesterday"]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a date"),
        "{out:?}"
    );
}
