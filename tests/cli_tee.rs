//! The in-job `--output` wrapper: copies output to the journal (stdout) and the
//! user's file (its stdin descriptor), and exits as the command did.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

fn tee(args: &[&str]) -> (std::process::Output, String) {
    tee_into("", args)
}

/// Runs the wrapper with an output file that held `before` (opened, as the
/// client does, without truncating it).
fn tee_into(before: &str, args: &[&str]) -> (std::process::Output, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.txt");
    std::fs::write(&path, before).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_xlurm"))
        .arg("__tee-output")
        .arg("--")
        .args(args)
        .stdin(Stdio::from(file))
        .output()
        .unwrap();
    (out, std::fs::read_to_string(&path).unwrap())
}

#[test]
fn copies_stdout_and_stderr_to_both_and_keeps_the_exit_code() {
    let (out, file) = tee(&[
        "/bin/sh",
        "-c",
        "echo one; echo two >&2; read x || echo stdin-is-empty; exit 3",
    ]);
    assert_eq!(out.status.code(), Some(3));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for want in ["one", "two", "stdin-is-empty"] {
        assert!(stdout.contains(want), "{stdout}");
        assert!(file.contains(want), "{file}");
    }
}

#[test]
fn dies_by_the_signal_that_killed_the_command() {
    let (out, _) = tee(&["/bin/sh", "-c", "kill -KILL $$"]);
    assert_eq!(out.status.signal(), Some(9));
}

#[test]
fn a_missing_command_exits_203_like_systemd() {
    let (out, _) = tee(&["/nonexistent/cmd"]);
    assert_eq!(out.status.code(), Some(203));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot execute /nonexistent/cmd"));
}

#[test]
fn the_output_file_starts_empty_when_the_job_starts() {
    let (out, file) = tee_into(
        "an older and much longer run's output\n",
        &["/bin/echo", "new"],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(file, "new\n");
}

#[test]
fn an_array_task_opens_its_own_file_and_a_file_it_cannot_open_leaves_the_journal_copy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out-7_3.txt");
    std::fs::write(&path, "an older run's longer output\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_xlurm"))
        .args(["__tee-output", "--open", path.to_str().unwrap(), "--"])
        .args(["/bin/echo", "task three"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "task three\n");
    let out = Command::new(env!("CARGO_BIN_EXE_xlurm"))
        .args(["__tee-output", "--open", "/nonexistent/dir/out.txt", "--"])
        .args(["/bin/sh", "-c", "echo still runs; exit 4"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "the command ran anyway");
    assert!(String::from_utf8_lossy(&out.stdout).contains("still runs"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open the --output file"));
}

/// Second review, M4: an array task's file is named when the task starts
/// (`%A_%a`, predictable) and may be in a directory others can write. A
/// symbolic link planted there is not followed (its target keeps its
/// contents; the output is in the journal), and a new file gets the mode
/// the job's umask (its unit's `UMask=`, the submitter's) allows.
#[test]
fn an_array_task_follows_no_planted_link_and_keeps_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let precious = dir.path().join("precious");
    std::fs::write(&precious, "precious\n").unwrap();
    let planted = dir.path().join("out-7_0.txt");
    std::os::unix::fs::symlink(&precious, &planted).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_xlurm"))
        .args(["__tee-output", "--open", planted.to_str().unwrap(), "--"])
        .args(["/bin/echo", "job output"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "the command ran anyway");
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "precious\n");
    assert!(String::from_utf8_lossy(&out.stdout).contains("job output"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open the --output file"));

    let private = dir.path().join("out-7_1.txt");
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            "umask 077; exec \"$0\" __tee-output --open '{}' -- /bin/echo secret",
            private.display()
        ))
        .arg(env!("CARGO_BIN_EXE_xlurm"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let mode = std::fs::metadata(&private).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");
}
