//! `xlurm top`'s screen, drawn on ratatui's test backend (80x24, as over
//! ssh) from a machine with fake devices, and its cost with 10,000 jobs.

use super::*;
use ratatui::backend::TestBackend;
use ratatui::Terminal;

fn put(m: &mut Dict, k: &str, v: zbus::Variant<'_>) {
    m.insert(k.into(), zbus::OwnedVariant::try_from(v).unwrap());
}

const NOW: u64 = 1_800_000_000_000_000;

fn machine() -> Dict {
    let mut m = Dict::new();
    let mut nodes = Vec::new();
    for (id, cpus, free) in [(0u32, "0-3", "2-3"), (1, "4-7", "4-7")] {
        let mut n = Dict::new();
        put(&mut n, "id", id.into());
        put(&mut n, "cpus", cpus.into());
        put(&mut n, "cpus_free", free.into());
        put(&mut n, "mem", (16u64 << 30).into());
        put(&mut n, "mem_free", (12u64 << 30).into());
        nodes.push(n);
    }
    put(&mut m, "nodes", nodes.into());
    let mut devs = Vec::new();
    for (i, job, health, util) in [(0u32, 7u64, "ok", Some(93u32)), (1, 0, "busy", None)] {
        let mut d = Dict::new();
        put(&mut d, "vendor", "nv".into());
        put(&mut d, "index", i.into());
        put(&mut d, "health", health.into());
        put(&mut d, "disabled", false.into());
        put(&mut d, "job", job.into());
        if let Some(u) = util {
            put(&mut d, "util_pct", u.into());
            put(&mut d, "mem_used", (30u64 << 30).into());
            put(&mut d, "mem_total", (80u64 << 30).into());
        }
        devs.push(d);
    }
    put(&mut m, "devices", devs.into());
    put(&mut m, "policy", "backfill".into());
    m
}

fn job(id: u64, user: &str, state: &str) -> Job {
    Job {
        id,
        uid: if user == "alice" { 1001 } else { 1002 },
        user: user.into(),
        name: format!("train-{id}"),
        state: state.into(),
        reason: if state == "PENDING" {
            "Resources (GPUs: needs 1, 0 free)".into()
        } else {
            String::new()
        },
        submit: NOW - 600_000_000,
        start: if state == "RUNNING" {
            NOW - 3_661_000_000
        } else {
            0
        },
        limit: 7200,
        cpus: 2,
        mem: 4 << 30,
        devices: "nv:0".into(),
        gpu_util: (state == "RUNNING").then_some(93.0),
        expected: None,
    }
}

fn model(n_pending: u64) -> Model {
    let mut jobs = BTreeMap::new();
    jobs.insert(7, job(7, "alice", "RUNNING"));
    for i in 0..n_pending {
        let id = 8 + i;
        jobs.insert(
            id,
            job(id, if i % 2 == 0 { "bob" } else { "alice" }, "PENDING"),
        );
    }
    Model {
        machine: machine(),
        jobs,
        now: NOW,
        me: 1001,
    }
}

fn screen(m: &Model, ui: &Ui) -> Vec<String> {
    let mut t = Terminal::new(TestBackend::new(80, 24)).unwrap();
    t.draw(|f| draw(f, m, ui)).unwrap();
    let buf = t.backend().buffer().clone();
    (0..24)
        .map(|y| {
            (0..80)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .collect()
}

#[test]
fn the_screen_shows_nodes_devices_and_jobs_in_80x24() {
    let lines = screen(&model(2), &Ui::default());
    let all = lines.join("\n");
    assert_eq!(
        lines[0],
        "xlurm top  backfill  1 running, 2 pending  sort id  keys q s m Enter c"
    );
    // Node 0: 2 of 4 CPUs and 4G of 16G in use.
    assert!(all.contains("│0    2/4     4G/16G"), "{all}");
    assert!(all.contains("│1    0/4     4G/16G"), "{all}");
    // The held GPU: busy percent, memory and its job's owner; the other one
    // is used by an outside process.
    assert!(
        all.contains("│nv:0   93%   30G/80G     job 7 alice"),
        "{all}"
    );
    assert!(
        all.contains("│nv:1   -     -           outside process"),
        "{all}"
    );
    assert!(
        all.contains("│7      alice    train-7      01:01:01/02:00:00 2c 4G   nv:0 93%"),
        "{all}"
    );
    assert!(
        all.contains("│8      bob      train-8      Resources        waits 00:10:00"),
        "{all}"
    );
    assert!(all.contains("waits 00:10:00"), "{all}");
    // Only your own jobs: bob's pending job goes.
    let mine = screen(
        &model(2),
        &Ui {
            mine: true,
            ..Ui::default()
        },
    )
    .join("\n");
    assert!(!mine.contains("train-8"), "{mine}");
    assert!(mine.contains("train-9"), "{mine}");
}

#[test]
fn the_detail_replaces_the_tables_and_the_text_view_has_everything() {
    let ui = Ui {
        detail: Some(vec!["Job 7".into(), "State: RUNNING".into()]),
        ..Ui::default()
    };
    let all = screen(&model(1), &ui).join("\n");
    assert!(
        all.contains("State: RUNNING") && !all.contains("NUMA nodes"),
        "{all}"
    );
    let t = text(&model(2), &Ui::default());
    for want in [
        "NODE CPUS",
        "nv:0    93%",
        "job 7 alice",
        "RUNNING (1)",
        "PENDING (2)",
        "train-9",
    ] {
        assert!(t.contains(want), "{want} in\n{t}");
    }
}

#[test]
fn selection_scrolls_and_ten_thousand_jobs_draw_only_what_fits() {
    let m = model(10_000);
    let ui = Ui {
        selected: 5_000,
        sort: Sort::User,
        ..Ui::default()
    };
    let all = screen(&m, &ui).join("\n");
    assert!(all.contains("pending (10000)"), "{all}");
    let sel = m.selected(&ui).unwrap();
    assert!(
        all.contains(&format!("{:<6} {:<8} {}", sel.id, sel.user, sel.name)),
        "{sel:?}\n{all}"
    );
}
