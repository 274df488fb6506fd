//! Generates the man pages and shell completions from the clap definitions.
//!
//! Writes into `$OUT_DIR/{man,completions}` and copies both into `<target>/generated/`
//! (`target/generated/` for a native build), where `packaging/build-deb.sh` and
//! `packaging/install.sh` pick them up:
//!
//! - `man/xlurm.1`, `man/xrun.1`, `man/xbatch.1`, `man/xqueue.1`, `man/xcancel.1`,
//!   `man/xinfo.1` (the subcommands under their own names), `man/xlurmd.8`;
//! - `completions/bash/NAME`, `completions/zsh/_NAME`, `completions/fish/NAME.fish` for
//!   `xlurm` and each of the five command names.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use clap::{Command, CommandFactory};
use clap_complete::Shell;
use clap_mangen::roff::{bold, italic, roman, Inline, Roff};
use clap_mangen::Man;

#[allow(dead_code)]
#[path = "src/cli/args.rs"]
mod args;
#[allow(dead_code)]
#[path = "src/daemon/options.rs"]
mod options;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const MANUAL: &str = "xlurm manual";

/// The command names: (name, `xlurm` subcommand).
const ALIASES: [(&str, &str); 5] = [
    ("xrun", "run"),
    ("xbatch", "batch"),
    ("xqueue", "queue"),
    ("xcancel", "cancel"),
    ("xinfo", "info"),
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/cli/args.rs");
    println!("cargo:rerun-if-changed=src/daemon/options.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    link_client_lean(&out);
    if let Err(e) = generate(&out) {
        panic!("generating man pages and completions: {e}");
    }
    // A stable place for the packaging: <target>/generated. OUT_DIR is
    // <target>/[<triple>/]<profile>/build/xlurm-<hash>/out; cargo marks <target> with
    // CACHEDIR.TAG.
    let target = out
        .ancestors()
        .skip(3)
        .find(|d| d.join("CACHEDIR.TAG").is_file())
        .or_else(|| out.ancestors().nth(4));
    if let Some(target) = target {
        let stable = target.join("generated");
        if let Err(e) = copy_tree(&out, &stable, &["man", "completions"]) {
            println!(
                "cargo:warning=cannot copy the man pages and completions to {}: {e}",
                stable.display()
            );
        }
    }
}

/// Links the `xlurm` client (every `xbatch`, `xqueue`... is one start of
/// it) so that the loader has less to do before `main` (issue 21):
///
/// - not as a position-independent executable (`-no-pie`): its 6,800
///   relocations, and the 40 pages of them read and the 25 pages they
///   write, are resolved when it is linked instead of at each start. The
///   client runs with its user's rights only, so its own code at a fixed
///   address costs no privilege; `xlurmd` stays PIE.
/// - with GCC's unwinder linked in (`libgcc_eh.a`) instead of
///   `libgcc_s.so.1`, whose constructor (`__cpu_indicator_init`) runs
///   `cpuid`, a trap in a virtual machine, at every start: a linker script
///   named `libgcc_s.so` in a directory searched before the system's
///   answers Rust's `-lgcc_s` with the archive. Skipped (the build still
///   works, the client starts slower) where the compiler has no
///   `libgcc_eh.a`.
///
/// `src/bin/xlurm.rs` does the rest (`#![no_main]`).
fn link_client_lean(out: &Path) {
    let target = std::env::var("TARGET").unwrap_or_default();
    if !target.contains("linux-gnu") {
        return;
    }
    println!("cargo:rustc-link-arg-bin=xlurm=-no-pie");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let eh = std::process::Command::new(&cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|p| p.is_absolute() && p.is_file());
    let Some(eh) = eh else {
        println!("cargo:warning={cc} has no libgcc_eh.a: xlurm links libgcc_s.so.1");
        return;
    };
    let dir = out.join("lean-link");
    let script = format!("INPUT({})\n", eh.display());
    if let Err(e) =
        fs::create_dir_all(&dir).and_then(|()| fs::write(dir.join("libgcc_s.so"), script))
    {
        println!("cargo:warning=cannot write {}: {e}", dir.display());
        return;
    }
    println!("cargo:rustc-link-arg-bin=xlurm=-L{}", dir.display());
}

fn generate(out: &Path) -> io::Result<()> {
    let man = out.join("man");
    let comp = out.join("completions");
    for d in [
        man.clone(),
        comp.join("bash"),
        comp.join("zsh"),
        comp.join("fish"),
    ] {
        fs::create_dir_all(d)?;
    }

    let mut cli = args::Cli::command().disable_help_subcommand(true);
    cli.build(); // propagates the global --user into the subcommands

    // xlurm(1)
    let mut page = page_head(cli.clone().long_about(XLURM_DESCRIPTION), "1")?;
    page.push_str(&commands_section(&cli));
    page.push_str(&sections(&[
        ("ENVIRONMENT", XLURM_ENVIRONMENT),
        ("EXIT STATUS", XLURM_EXIT),
        ("FILES", XLURM_FILES),
    ]));
    page.push_str(&see_also(&[
        "xrun(1)",
        "xbatch(1)",
        "xqueue(1)",
        "xcancel(1)",
        "xinfo(1)",
        "xlurmd(8)",
        "systemctl(1)",
        "journalctl(1)",
    ]));
    page.push_str(&version_section("xlurm"));
    fs::write(man.join("xlurm.1"), page)?;

    // xrun(1) ... xinfo(1): the subcommands under their own names.
    for (name, sub) in ALIASES {
        let cmd = alias(&cli, name, sub);
        let (desc, extra): (&str, &[(&str, &str)]) = match name {
            "xrun" => (
                XRUN_DESCRIPTION,
                &[("EXIT STATUS", XRUN_EXIT), ("EXAMPLES", XRUN_EXAMPLES)],
            ),
            "xbatch" => (
                XBATCH_DESCRIPTION,
                &[
                    ("#SBATCH DIRECTIVES", XBATCH_SBATCH),
                    ("EXAMPLES", XBATCH_EXAMPLES),
                ],
            ),
            "xqueue" => (
                XQUEUE_DESCRIPTION,
                &[
                    ("JOB STATES", XQUEUE_STATES),
                    ("PENDING REASONS", XQUEUE_REASONS),
                ],
            ),
            "xcancel" => (XCANCEL_DESCRIPTION, &[]),
            _ => (XINFO_DESCRIPTION, &[]),
        };
        let mut page = page_head(
            cmd.clone()
                .long_about(desc.replace("{name}", name).replace("{sub}", sub)),
            "1",
        )?;
        page.push_str(&sections(extra));
        let mut also = vec!["xlurm(1)"];
        also.extend(
            ALIASES
                .iter()
                .map(|(n, _)| *n)
                .filter(|n| *n != name)
                .map(|n| match n {
                    "xrun" => "xrun(1)",
                    "xbatch" => "xbatch(1)",
                    "xqueue" => "xqueue(1)",
                    "xcancel" => "xcancel(1)",
                    _ => "xinfo(1)",
                }),
        );
        also.push("xlurmd(8)");
        page.push_str(&see_also(&also));
        page.push_str(&version_section("xlurm"));
        fs::write(man.join(format!("{name}.1")), page)?;
    }

    // xlurmd(8)
    let mut d = options::Options::command();
    d.build();
    let mut page = page_head(d.long_about(XLURMD_DESCRIPTION), "8")?;
    page.push_str(&sections(&[
        ("EXIT STATUS", XLURMD_EXIT),
        ("FILES", XLURMD_FILES),
        ("RESTART AND UPGRADE", XLURMD_RESTART),
    ]));
    page.push_str(&see_also(&[
        "xlurm(1)",
        "xrun(1)",
        "systemctl(1)",
        "systemd.resource-control(5)",
        "polkit(8)",
        "busctl(1)",
    ]));
    page.push_str(&version_section("xlurmd"));
    fs::write(man.join("xlurmd.8"), page)?;

    // Completions: xlurm, and each command name on its own.
    let mut all = vec![("xlurm", cli.clone())];
    for (name, sub) in ALIASES {
        all.push((name, alias(&cli, name, sub)));
    }
    for (name, mut cmd) in all {
        for (shell, file) in [
            (Shell::Bash, comp.join("bash").join(name)),
            (Shell::Zsh, comp.join("zsh").join(format!("_{name}"))),
            (Shell::Fish, comp.join("fish").join(format!("{name}.fish"))),
        ] {
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut cmd, name, &mut buf);
            fs::write(file, buf)?;
        }
    }
    Ok(())
}

/// `xlurm SUB` as the command `NAME`.
fn alias(cli: &Command, name: &'static str, sub: &str) -> Command {
    cli.find_subcommand(sub)
        .unwrap_or_else(|| {
            panic!("build.rs: `xlurm {sub}` (for {name}) is missing in src/cli/args.rs")
        })
        .clone()
        .name(name)
        .display_name(name)
        .bin_name(name)
        .version(VERSION)
}

/// Title, NAME, SYNOPSIS, DESCRIPTION and OPTIONS, rendered by clap_mangen.
fn page_head(cmd: Command, section: &str) -> io::Result<String> {
    let title = cmd.get_name().to_uppercase();
    let man = Man::new(cmd)
        .title(title)
        .section(section)
        .manual(MANUAL)
        .source(format!("xlurm {VERSION}"));
    let mut parts = Vec::new();
    let mut buf = Vec::new();
    man.render_title(&mut buf)?;
    parts.push(buf);
    for render in [
        Man::render_name_section,
        Man::render_synopsis_section,
        Man::render_description_section,
        Man::render_options_section,
    ] {
        let mut buf = Vec::new();
        render(&man, &mut buf)?;
        parts.push(buf);
    }
    let mut page = String::new();
    for (i, part) in parts.into_iter().enumerate() {
        let s = String::from_utf8(part).expect("roff output is UTF-8");
        page.push_str(&if i == 0 { s } else { strip_preamble(&s) });
    }
    Ok(page)
}

/// Drops roff's apostrophe preamble (`.ie \n(.g .ds Aq ...`), kept once at the top of a page.
fn strip_preamble(s: &str) -> String {
    s.lines()
        .filter(|l| !l.starts_with(".ie \\n(.g .ds Aq") && !l.starts_with(".el .ds Aq"))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn render(roff: &Roff) -> String {
    strip_preamble(&roff.render())
}

/// The COMMANDS section of xlurm(1): each subcommand with its usage and command name.
fn commands_section(cli: &Command) -> String {
    let mut r = Roff::new();
    r.control("SH", ["COMMANDS"]);
    for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
        r.control("TP", []);
        let mut head: Vec<Inline> = vec![bold(format!("xlurm {}", sub.get_name()))];
        for a in sub
            .get_arguments()
            .filter(|a| a.is_positional() && !a.is_hide_set())
        {
            let v = a
                .get_value_names()
                .and_then(|v| v.first())
                .map(|v| v.to_string())
                .unwrap_or_else(|| a.get_id().to_string().to_uppercase());
            head.push(roman(" "));
            head.push(italic(if a.is_required_set() {
                v
            } else {
                format!("[{v}]")
            }));
        }
        if let Some((n, _)) = ALIASES.iter().find(|(_, s)| *s == sub.get_name()) {
            head.push(roman(format!(" (also {n}; see {n}(1))")));
        }
        r.text(head);
        if let Some(about) = sub.get_about() {
            r.text([roman(about.to_string())]);
        }
    }
    render(&r)
}

/// Sections of plain paragraphs; a line starting with "* " is an indented list item
/// (`TERM: text` items render TERM in bold).
fn sections(list: &[(&str, &str)]) -> String {
    let mut r = Roff::new();
    for (title, body) in list {
        r.control("SH", [*title]);
        paragraphs(&mut r, body);
    }
    render(&r)
}

fn paragraphs(r: &mut Roff, body: &str) {
    let mut first = true;
    for para in body.trim().split("\n\n") {
        let para = para.trim();
        if let Some(items) = para.strip_prefix("* ") {
            for item in items.split("\n* ") {
                let item = item.split_whitespace().collect::<Vec<_>>().join(" ");
                r.control("TP", []);
                match item.split_once(": ") {
                    Some((term, text)) => {
                        r.text([bold(term)]);
                        r.text([roman(text)]);
                    }
                    None => {
                        r.text([roman(item)]);
                    }
                }
            }
        } else if let Some(code) = para.strip_prefix("$ ") {
            r.control("PP", []);
            r.control("nf", []);
            r.control("RS", ["4"]);
            for line in code.split("\n$ ") {
                r.text([roman(line.trim())]);
            }
            r.control("RE", []);
            r.control("fi", []);
        } else {
            if !first {
                r.control("PP", []);
            }
            r.text([roman(para.split_whitespace().collect::<Vec<_>>().join(" "))]);
        }
        first = false;
    }
}

fn see_also(pages: &[&str]) -> String {
    let mut r = Roff::new();
    r.control("SH", ["SEE ALSO"]);
    let mut line = Vec::new();
    for (i, p) in pages.iter().enumerate() {
        let (name, sec) = p.split_once('(').unwrap_or((p, ""));
        line.push(bold(name));
        line.push(roman(format!(
            "({sec}{}",
            if i + 1 < pages.len() { ", " } else { "" }
        )));
    }
    r.text(line);
    r.control("PP", []);
    r.text([roman("/usr/share/doc/xlurm/README.md (in the sources: README.md): using it, the admin guide, the D-Bus API.")]);
    render(&r)
}

fn version_section(name: &str) -> String {
    let mut r = Roff::new();
    r.control("SH", ["VERSION"]);
    r.text([roman(format!("{name} {VERSION}"))]);
    render(&r)
}

/// Copies OUT_DIR's `dirs` into `dst`, replacing what was there.
fn copy_tree(src: &Path, dst: &Path, dirs: &[&str]) -> io::Result<()> {
    fn copy_dir(s: &Path, d: &Path) -> io::Result<()> {
        fs::create_dir_all(d)?;
        for e in fs::read_dir(s)? {
            let e = e?;
            let to = d.join(e.file_name());
            if e.file_type()?.is_dir() {
                copy_dir(&e.path(), &to)?;
            } else {
                fs::copy(e.path(), to)?;
            }
        }
        Ok(())
    }
    for dir in dirs {
        let to = dst.join(dir);
        if to.exists() {
            fs::remove_dir_all(&to)?;
        }
        copy_dir(&src.join(dir), &to)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Hand-written text (what clap's help does not say). Keep it in step with README.md.

const XLURM_DESCRIPTION: &str = "\
xlurm submits jobs to xlurmd(8), the scheduler daemon that owns org.xlurm.Scheduler1 on the \
system bus, and shows the queue and the machine. Every job runs as its own transient systemd \
unit, xlurm-job-ID.service in xlurm.slice, pinned to its CPUs and NUMA nodes, held to a hard \
memory budget, fenced off from devices it was not given, bounded in time and logged to the \
journal; it runs as the user who submitted it.

The same program, called as xrun, xbatch, xqueue, xcancel or xinfo, runs xlurm run, xlurm \
batch, xlurm queue, xlurm cancel or xlurm info; each has its own page. The caller is \
identified by the bus, never by arguments. Admin commands (policy, max-running, exclude, \
include, and acting on other users' jobs) need the polkit action org.xlurm.scheduler.manage \
(root always has it).";

const XLURM_ENVIRONMENT: &str = "\
* XLURM_USER_BUS: set to 1 (or true): talk to a development daemon on the session bus (xlurmd --user); same as --user.";

const XLURM_EXIT: &str = "\
0 on success; 1 on an error (the daemon refused the request, no such job, no permission: \
one line on standard error); 2 on a bad command line. xlurm run exits with its job's code: see \
xrun(1).";

const XLURM_FILES: &str = "\
* /usr/lib/systemd/system/xlurmd.service, xlurm.slice: the daemon and the slice jobs run in.
* /usr/share/polkit-1/actions/org.xlurm.scheduler.policy: the admin action; to grant it to a group, copy /usr/share/doc/xlurm/examples/50-xlurm-admin.rules.example to /etc/polkit-1/rules.d/50-xlurm-admin.rules.";

const XRUN_DESCRIPTION: &str = "\
{name} (xlurm {sub}) submits COMMAND as a job and waits in the foreground until it ends, then \
exits with the job's exit code. Options go before the command; everything from the command on \
is passed to it unchanged (-- is optional). The job runs as you, in the current directory; \
your environment is forwarded unless --clean-env is given (it is stored readable by root only \
and dropped once the job starts).

Without -m the job gets its CPUs' share of memory (4 of 32 cores on a 256 GiB machine: 32 GiB), \
at least the daemon's --min-job-mem; --exclusive gets the whole machine. Memory is charged per \
NUMA node; a budget that fits no single node is spread unless --numa-local.

Ctrl-C, SIGTERM and a hang-up cancel the job and still print its final state.";

const XRUN_EXIT: &str = "\
* N: the job's own exit status N.
* 128+N: the job was killed by signal N.
* 124: TIMEOUT, the job ran past its time limit.
* 125: LAUNCH_FAILED, systemd could not start it (missing binary, bad user...).
* 126: LOST, its unit vanished while xlurmd was down.
* 130: CANCELLED.
* 137: OUT_OF_MEMORY, the job went over its memory budget.";

const XRUN_EXAMPLES: &str = "\
$ xrun -g 0 echo hello
$ xrun -g 0 -c 4 -m 16G python train.py --epochs 3
$ xrun --device nv -i 0,1 -t 2h ./bench";

const XBATCH_DESCRIPTION: &str = "\
{name} (xlurm {sub}) queues a batch script, or a command line given with --wrap, and prints its \
job ID. A snapshot of the script is taken at submission, so later edits do not change the job. \
The job runs as you, in the current directory, with your environment unless --clean-env. Watch \
it with xqueue(1), cancel it with xcancel(1); its output goes to the journal.";

const XBATCH_SBATCH: &str = "\
Lines starting with #SBATCH at the top of the script (up to its first command) are read as \
Slurm's sbatch reads them, with the value attached or as the next word (--mem=8G or --mem 8G, \
-c4 or -c 4). Options on the command line win. Honoured: --gres=gpu[:TYPE][:N] (no count: 1), \
-G/--gpus [TYPE:]N, --gpus-per-node, -c/--cpus-per-task, --mem (a plain number is megabytes), \
--mem-per-cpu (times the CPUs), -t/--time (MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]], UNLIMITED), \
-J/--job-name, -o/--output (only %j is replaced), --exclusive, and -N 1, -n 1, \
--ntasks-per-node=1, --begin=now, --export=ALL. Directives that change no outcome on one \
machine (--partition, --account, --mail-type, --qos, --error, --nice, ...) are named in a \
warning and otherwise ignored. Every other directive is an error naming its line, and nothing \
is queued: more than one node or task, --begin later than now, --chdir, an unknown option; \
--array, --dependency, --hold and --requeue are not supported yet. So is a value xlurm cannot \
use in a directive it reads. Without a GPU directive or -g, a job gets 1 device on a machine \
with accelerators (-g 0 for none). Every job gets Slurm's variables (SLURM_JOB_ID, \
SLURM_CPUS_PER_TASK, SLURM_MEM_PER_NODE, SLURM_NODELIST, ...; see the README).";

const XBATCH_EXAMPLES: &str = "\
$ xbatch -t 2h job.sh arg1
$ xbatch --wrap 'make -j8 && make test'";

const XQUEUE_DESCRIPTION: &str = "\
{name} (xlurm {sub}) lists the active jobs of all users (a summary only: never commands, \
environments or output), or with --all also the finished ones with their exit codes, or with \
--mine only yours. With a job ID it shows that job in detail; its command and environment are \
shown to its owner and root only.";

const XQUEUE_STATES: &str = "\
PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY, LAUNCH_FAILED, LOST (its \
unit vanished while xlurmd was down, e.g. a reboot; never re-run).";

const XQUEUE_REASONS: &str = "\
Every pending job shows why it waits: Resources (which), Priority, DevicesBusy, DevicesUnknown, \
DevicesDisabled, MaxRunning, Exclusive.";

const XCANCEL_DESCRIPTION: &str = "\
{name} (xlurm {sub}) cancels the given jobs (also xqueue --cancel ID): pending ones never start, \
running ones are stopped by systemd (their unit is stopped: SIGTERM to every process, then SIGKILL \
after xlurmd's --cancel-grace, 10 s by default) and end CANCELLED. You may cancel your own jobs; \
others' need the admin action org.xlurm.scheduler.manage.";

const XINFO_DESCRIPTION: &str = "\
{name} (xlurm {sub}) shows the machine as xlurmd sees it: NUMA nodes with their CPUs and memory, \
what is free, accelerators by vendor, and the scheduling policy, the running limit and how many \
jobs are pending and running.";

const XLURMD_DESCRIPTION: &str = "\
xlurmd owns org.xlurm.Scheduler1 on the system bus and runs every job as a transient systemd unit \
(xlurm-job-ID.service in xlurm.slice, or the slice given by --slice) with AllowedCPUs, \
AllowedMemoryNodes (or NUMAPolicy=local, see --memory-nodes), MemoryMax, MemorySwapMax=0, \
DevicePolicy=closed and RuntimeMaxUSec, as the \
submitting user. It is started by xlurmd.service (or by bus activation); set options with a \
drop-in: systemctl edit xlurmd, then an ExecStart= line that clears the old one and a new \
ExecStart=/usr/bin/xlurmd with the options.

Policies: fifo-strict runs jobs in order and stops at the first that does not fit; easy-backfill \
(the default) fills idle resources but holds freed ones for the head of the queue once it \
blocks; strict-backfill lets a later job pass only if it ends, by its time limit, before the \
head's reserved start, or uses what the head does not need; largest-first starts the biggest \
demand first. Every job is bounded by --max-lifetime, so no policy starves the head. xlurm \
policy NAME changes it live.";

const XLURMD_EXIT: &str = "\
78 (EX_CONFIG) when it refuses to start, with one line naming the cause and the opt-out flag: not \
root on the system bus, no cgroup v2 cpuset and memory controllers (--no-cgroup-check), systemd \
unreachable, a bad option. The unit does not restart it then.";

const XLURMD_FILES: &str = "\
* /var/lib/xlurm: job state, an append-only log (root only), compacted at start. Kept when the package is removed; removed on purge.
* /usr/lib/systemd/system/xlurmd.service: the unit; options go in a drop-in (systemctl edit xlurmd).
* /usr/lib/systemd/system/xlurm.slice: the slice all jobs run in; pool-wide limits can go there.
* /usr/share/dbus-1/system.d/org.xlurm.Scheduler1.conf: who may own and call the bus name.
* /usr/share/dbus-1/interfaces/org.xlurm.Scheduler1.xml: the D-Bus interface.
* /usr/share/polkit-1/actions/org.xlurm.scheduler.policy: the admin action org.xlurm.scheduler.manage (auth_admin_keep).";

const XLURMD_RESTART: &str = "\
Jobs are systemd units of their own, so systemctl restart xlurmd, a crash or a package upgrade \
never touches them. At start xlurmd re-adopts running jobs, records those that finished \
meanwhile, and marks vanished ones LOST.";
