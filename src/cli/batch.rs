//! `xbatch`: submits a batch script (or `--wrap`), its `#SBATCH` lines read.

use super::client::connect;
use super::sbatch::apply_sbatch;
use super::submit::{copied_output, output_of, spec_from, submit_with_output};
use super::BatchArgs;
use crate::core::request::format_bytes;
use crate::wire::keys;
use anyhow::{bail, Context, Result};

pub(super) async fn batch(mut a: BatchArgs, user: bool) -> Result<i32> {
    if a.pty {
        bail!("--pty is for interactive jobs: a batch job has no terminal (use xrun --pty)");
    }
    let (script, args, file_name) = match (&a.wrap, a.script.split_first()) {
        (Some(w), None) => (format!("#!/bin/bash\n{w}\n"), Vec::new(), None),
        (Some(_), Some(_)) => bail!("give either --wrap 'COMMAND' or a script, not both"),
        (None, Some((path, rest))) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read batch script {path}"))?;
            let name = std::path::Path::new(path)
                .file_name()
                .map(|n| n.to_string_lossy().to_string());
            (text, rest.to_vec(), name)
        }
        (None, None) => bail!("give a batch script (xbatch job.sh) or --wrap 'COMMAND'"),
    };
    let source = a.script.first().map_or("--wrap", String::as_str);
    for w in apply_sbatch(&script, &mut a.res).with_context(|| source.to_string())? {
        eprintln!("xbatch: warning: {w}");
    }
    // -n, then #SBATCH --job-name, then the script's file name.
    if a.res.name.is_none() {
        a.res.name = Some(file_name.unwrap_or_else(|| "wrap".into()));
    }
    let p = connect(user).await?;
    let spec = spec_from(&a.res, args, Some(script))?;
    // An array's tasks each write their own file (%A_%a), which each opens
    // as you when it starts; a single job's file is opened here, now.
    let mut spec = spec;
    let output = match (&a.res.array, copied_output(&a.res)) {
        (Some(_), Some(o)) => {
            let path = std::env::current_dir()?.join(o);
            let (k, v) = crate::wire::spec::entry("output_template", path.display().to_string());
            spec.insert(k, v);
            None
        }
        _ => output_of(&a.res)?,
    };
    let (id, info) = submit_with_output(&p, spec, output, user).await?;
    let defaulted = keys::submitted::GPUS_DEFAULT.get(&info).unwrap_or(false);
    let mem = keys::submitted::MEM
        .get(&info)
        .map(format_bytes)
        .unwrap_or_default();
    println!("Submitted batch job {id}");
    // One write: stderr is unbuffered, and eprintln! writes each piece.
    let note = format!(
        "memory budget {mem}{}{}\n",
        if keys::submitted::MEM_DEFAULT.get(&info).unwrap_or(false) {
            " (default)"
        } else {
            ""
        },
        if defaulted {
            ", 1 device (the default here; -g 0 for a CPU job)"
        } else {
            ""
        }
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), note.as_bytes());
    Ok(0)
}
