//! One line of the queue as it crosses the bus, and its hand codec.
//!
//! The fields are listed once, in the `queue_line!` call below; from that list
//! come [`JobSummary`] (owned: the D-Bus struct `ListJobs` returns), [`Line`]
//! (borrowed: what the daemon encodes from its records and the client decodes
//! from `ListJobsByFileDescriptor`'s bytes), the conversions between them, and
//! the codec's writer and reader.
//!
//! The codec writes `a(tsusssttttutbsiss)` by hand: zvariant's generic path
//! costs about 0.4 µs a line each way, most of listing 100,000 jobs. The tests
//! compare both encoders byte for byte and decode each other's output.

use std::borrow::Cow;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// Bytes of one line on the wire, its strings aside (fixed fields, string
/// lengths and terminators, the worst alignment padding).
pub const LINE_FIXED_BYTES: usize = 112;

/// The type of one field of a queue line: how a [`Line`] borrows it, and how
/// the codec writes and reads it.
pub trait Field: Sized {
    /// The field in a [`Line`].
    type Ref<'a>;
    fn borrow(&self) -> Self::Ref<'_>;
    fn own(r: Self::Ref<'_>) -> Self;
    fn put(b: &mut Vec<u8>, r: &Self::Ref<'_>);
    fn take<'a>(r: &mut Reader<'a>) -> anyhow::Result<Self::Ref<'a>>;
    /// Bytes of text it holds: a string's length, 0 for the rest.
    fn text_len(_r: &Self::Ref<'_>) -> usize {
        0
    }
}

fn pad(b: &mut Vec<u8>, align: usize) {
    b.resize(b.len().next_multiple_of(align), 0);
}

fn put_u32(b: &mut Vec<u8>, v: u32) {
    pad(b, 4);
    b.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut Vec<u8>, v: u64) {
    pad(b, 8);
    b.extend_from_slice(&v.to_le_bytes());
}

/// A field carried as itself (`t`, `u`, `i`, `b`).
macro_rules! plain_field {
    ($t:ty, $put:expr, $take:expr) => {
        impl Field for $t {
            type Ref<'a> = $t;
            fn borrow(&self) -> $t {
                *self
            }
            fn own(r: $t) -> $t {
                r
            }
            fn put(b: &mut Vec<u8>, r: &$t) {
                ($put)(b, *r)
            }
            fn take(r: &mut Reader<'_>) -> anyhow::Result<$t> {
                ($take)(r)
            }
        }
    };
}

plain_field!(u64, put_u64, Reader::u64);
plain_field!(u32, put_u32, Reader::u32);
plain_field!(i32, |b, v: i32| put_u32(b, v as u32), |r: &mut Reader<
    '_,
>| r
    .u32()
    .map(|v| v as i32));
plain_field!(bool, |b, v| put_u32(b, u32::from(v)), Reader::bool);

/// A string (`s`), shared with the daemon's records when owned.
impl Field for Arc<str> {
    type Ref<'a> = Cow<'a, str>;
    fn borrow(&self) -> Cow<'_, str> {
        Cow::Borrowed(self)
    }
    fn own(r: Cow<'_, str>) -> Arc<str> {
        r.into()
    }
    fn put(b: &mut Vec<u8>, s: &Cow<'_, str>) {
        put_u32(b, s.len() as u32);
        b.extend_from_slice(s.as_bytes());
        b.push(0);
    }
    fn take<'a>(r: &mut Reader<'a>) -> anyhow::Result<Cow<'a, str>> {
        r.str()
    }
    fn text_len(s: &Cow<'_, str>) -> usize {
        s.len()
    }
}

/// Declares the queue line from its fields, each with its owned type.
macro_rules! queue_line {
    ($($(#[$doc:meta])* $field:ident: $t:ty,)*) => {
        /// One line of the queue: D-Bus struct `(tsusssttttutbsiss)`. A fixed
        /// struct, not `a{sv}`, so that listing 100,000 jobs stays cheap;
        /// `GetJob` has everything else. Strings are shared with the daemon's
        /// own records.
        #[derive(
            Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, zbus::wire::Type,
        )]
        #[zvariant(crate = "zbus::wire")]
        pub struct JobSummary {
            $($(#[$doc])* pub $field: $t,)*
        }

        /// One line of the queue, borrowed: from the daemon's records while it
        /// encodes them, or from the bytes a client read. The fields and their
        /// order are [`JobSummary`]'s (and `xqueue --json`'s keys, docs/json.md).
        #[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
        pub struct Line<'a> {
            $(pub $field: <$t as Field>::Ref<'a>,)*
        }

        impl From<Line<'_>> for JobSummary {
            fn from(l: Line<'_>) -> JobSummary {
                JobSummary {
                    $($field: Field::own(l.$field),)*
                }
            }
        }

        impl JobSummary {
            pub fn line(&self) -> Line<'_> {
                Line {
                    $($field: Field::borrow(&self.$field),)*
                }
            }
        }

        impl<'a> Line<'a> {
            /// Bytes of it on the wire, as estimated with [`LINE_FIXED_BYTES`].
            pub fn wire_bytes(&self) -> usize {
                LINE_FIXED_BYTES $(+ <$t as Field>::text_len(&self.$field))*
            }

            /// Writes it as one struct, padding `b` to an 8-aligned offset
            /// first (a struct's alignment).
            pub fn write(&self, b: &mut Vec<u8>) {
                pad(b, 8);
                $(<$t as Field>::put(b, &self.$field);)*
            }

            fn read(r: &mut Reader<'a>) -> anyhow::Result<Line<'a>> {
                Ok(Line {
                    $($field: <$t as Field>::take(r)?,)*
                })
            }
        }
    };
}

queue_line! {
    id: u64,
    name: Arc<str>,
    uid: u32,
    user: Arc<str>,
    /// PENDING, RUNNING, COMPLETED, ...
    state: Arc<str>,
    /// Why a pending job waits; empty otherwise.
    reason: Arc<str>,
    /// Microseconds since the epoch; 0 = not yet.
    submit_time: u64,
    start_time: u64,
    end_time: u64,
    /// Seconds.
    time_limit: u64,
    cpus: u32,
    /// Memory budget in bytes.
    mem: u64,
    /// Whether CPUs or memory span several NUMA nodes.
    spread: bool,
    /// Requested devices while pending (`cpu`, `auto:1`, `nv:[0,1]`), allocated ones after.
    devices: Arc<str>,
    /// The exit code xrun reports; -1 while the job has none.
    exit_code: i32,
    /// How the job ended, in a line; empty while it runs.
    detail: Arc<str>,
    /// Its place in an array: `123_4` for a task, `123_[5-99%8]` for the
    /// array's tasks not started yet; empty for a plain job.
    array: Arc<str>,
}

/// Reads the codec's bytes, refusing what is cut short or malformed.
pub struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, align: usize, n: usize) -> anyhow::Result<&'a [u8]> {
        let start = self.at.next_multiple_of(align);
        let end = start.checked_add(n).filter(|e| *e <= self.b.len());
        let end =
            end.ok_or_else(|| anyhow::anyhow!("the job list is cut short at byte {start}"))?;
        self.at = end;
        Ok(&self.b[start..end])
    }
    fn u32(&mut self) -> anyhow::Result<u32> {
        let s = self.take(4, 4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self) -> anyhow::Result<u64> {
        let s = self.take(8, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
    fn bool(&mut self) -> anyhow::Result<bool> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            v => anyhow::bail!("the job list has a boolean {v} at byte {}", self.at - 4),
        }
    }
    fn str(&mut self) -> anyhow::Result<Cow<'a, str>> {
        let n = self.u32()? as usize;
        let at = self.at;
        let s = self.take(1, n.saturating_add(1))?;
        anyhow::ensure!(
            s[n] == 0,
            "the job list has an unterminated string at byte {at}"
        );
        let s = std::str::from_utf8(&s[..n]).map_err(|_| {
            anyhow::anyhow!("the job list has a string that is not UTF-8 at byte {at}")
        })?;
        Ok(Cow::Borrowed(s))
    }
}

/// `lines` as a whole array (the daemon writes its own in pieces).
#[cfg(test)]
pub fn encode(lines: &[Line<'_>]) -> Vec<u8> {
    let mut b = vec![0; 8];
    for l in lines {
        l.write(&mut b);
    }
    let len = (b.len() - 8) as u32;
    b[..4].copy_from_slice(&len.to_le_bytes());
    b
}

/// The lines of an encoded array, borrowed from it.
pub fn decode(b: &[u8]) -> anyhow::Result<Vec<Line<'_>>> {
    let mut r = Reader { b, at: 0 };
    let len = r.u32()? as usize;
    r.at = 8;
    let end = 8usize.saturating_add(len);
    anyhow::ensure!(
        end <= b.len(),
        "the job list is cut short: {len} bytes announced, {} there",
        b.len().saturating_sub(8)
    );
    r.b = &b[..end];
    let mut out = Vec::with_capacity(len / 64);
    while r.at < end {
        r.at = r.at.next_multiple_of(8);
        out.push(Line::read(&mut r)?);
    }
    Ok(out)
}

/// A job list as read from `ListJobsByFileDescriptor`'s descriptor: mapped
/// where xlurmd sealed it against shrinking (it always does), else copied.
pub struct Listing(Bytes);

enum Bytes {
    Copied(Vec<u8>),
    /// A read-only shared mapping of the whole memfd; unmapped on drop.
    Mapped(std::ptr::NonNull<libc::c_void>, usize),
}

impl Listing {
    fn bytes(&self) -> &[u8] {
        match &self.0 {
            Bytes::Copied(v) => v,
            // SAFETY: the mapping is `len` readable bytes, lives as long as
            // `self`, and its file cannot shrink (F_SEAL_SHRINK), so no page
            // of it can vanish under the reader (no SIGBUS).
            Bytes::Mapped(p, len) => unsafe {
                std::slice::from_raw_parts(p.as_ptr().cast::<u8>(), *len)
            },
        }
    }

    /// Its lines, borrowed from it, oldest first.
    pub fn lines(&self) -> anyhow::Result<Vec<Line<'_>>> {
        decode(self.bytes())
    }

    /// Whether it is mapped rather than copied.
    pub fn is_mapped(&self) -> bool {
        matches!(self.0, Bytes::Mapped(..))
    }
}

// SAFETY: the mapping is read-only and owned by the `Listing` alone.
unsafe impl Send for Listing {}
// SAFETY: as for `Send`: shared access only ever reads it.
unsafe impl Sync for Listing {}

impl Drop for Listing {
    fn drop(&mut self) {
        if let Bytes::Mapped(p, len) = self.0 {
            // SAFETY: `p`/`len` are the mapping made in `read_fd`, unmapped once.
            unsafe { libc::munmap(p.as_ptr(), len) };
        }
    }
}

/// Reads the descriptor `ListJobsByFileDescriptor` returned. A 100,000-job
/// list is about 13 MB: mapping it instead of copying saves the copy and the
/// page faults of a buffer that size.
pub fn read_fd(fd: OwnedFd) -> anyhow::Result<Listing> {
    use anyhow::Context as _;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::from(fd);
    let len = file
        .metadata()
        .context("reading the job list's size")?
        .len() as usize;
    // SAFETY: F_GET_SEALS only reads the descriptor's seals.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    if len > 0 && seals >= 0 && seals & libc::F_SEAL_SHRINK != 0 {
        // SAFETY: a fresh read-only private mapping of `len` bytes of a file
        // that cannot shrink below `len`; nothing else aliases it mutably.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p != libc::MAP_FAILED {
            if let Some(p) = std::ptr::NonNull::new(p) {
                return Ok(Listing(Bytes::Mapped(p, len)));
            }
        }
    }
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, 0)
        .context("reading the job list")?;
    Ok(Listing(Bytes::Copied(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(id: u64, text: &str) -> JobSummary {
        JobSummary {
            id,
            name: text.into(),
            uid: 1001,
            user: "alice".into(),
            state: "PENDING".into(),
            reason: format!("{text}{text}").into(),
            submit_time: u64::MAX - id,
            start_time: 0,
            end_time: 1,
            time_limit: 60,
            cpus: 3,
            mem: 1 << 40,
            spread: id.is_multiple_of(2),
            devices: "nv:[0,1]".into(),
            exit_code: -1 - id as i32,
            detail: text.chars().rev().collect::<String>().into(),
            array: if id.is_multiple_of(3) {
                format!("{id}_[1-9%2]").into()
            } else {
                "".into()
            },
        }
    }

    #[test]
    fn the_signature_is_the_documented_one() {
        use zbus::zvariant::Type;
        assert_eq!(
            <Vec<JobSummary> as Type>::SIGNATURE.to_string(),
            "a(tsusssttttutbsiss)"
        );
    }

    #[test]
    fn a_list_that_could_shrink_is_copied_not_mapped() {
        use std::io::Write;
        let jobs = [sample(1, "abc"), sample(2, "héllo wörld")];
        let lines: Vec<Line<'_>> = jobs.iter().map(JobSummary::line).collect();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&encode(&lines)).unwrap();
        let listing = read_fd(f.into()).unwrap();
        assert!(!listing.is_mapped(), "a plain file can shrink: copied");
        let back: Vec<JobSummary> = listing
            .lines()
            .unwrap()
            .into_iter()
            .map(JobSummary::from)
            .collect();
        assert_eq!(back, jobs);
        let empty = read_fd(tempfile::tempfile().unwrap().into()).unwrap();
        assert!(!empty.is_mapped());
        assert!(empty.lines().is_err(), "an empty list is cut short");
    }

    #[test]
    fn the_hand_encoding_is_zvariants_byte_for_byte() {
        use zbus::wire::serialized::{Context, Data};
        let ctx = Context::new(zbus::wire::LE, 0);
        let texts = [
            "",
            "a",
            "ab",
            "abc",
            "abcd",
            "héllo wörld",
            "x y z 12345 67",
        ];
        for n in [0, 1, 2, 7] {
            let jobs: Vec<JobSummary> = (0..n)
                .map(|i| sample(i as u64, texts[i % texts.len()]))
                .collect();
            let lines: Vec<Line<'_>> = jobs.iter().map(JobSummary::line).collect();
            let ours = encode(&lines);
            let theirs = zbus::wire::to_bytes(ctx, &jobs).unwrap();
            assert_eq!(ours, theirs.to_vec(), "{n} lines");
            let back: Vec<JobSummary> = decode(&ours)
                .unwrap()
                .into_iter()
                .map(JobSummary::from)
                .collect();
            assert_eq!(back, jobs);
            let (theirs_back, _): (Vec<JobSummary>, _) =
                Data::new(&ours[..], ctx).deserialize().unwrap();
            assert_eq!(theirs_back, jobs);
        }
    }

    #[test]
    fn damaged_lists_are_refused_not_misread() {
        let jobs = [sample(1, "abc"), sample(2, "de")];
        let lines: Vec<Line<'_>> = jobs.iter().map(JobSummary::line).collect();
        let good = encode(&lines);
        for cut in [0, 3, 8, 20, good.len() - 1] {
            assert!(decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad_bool = good.clone();
        // The first line's `spread` (false) sits after 12 fields; find it by re-encoding.
        let spread_at = {
            let mut probe = sample(1, "abc");
            probe.spread = true;
            let p = encode(&[probe.line(), jobs[1].line()]);
            good.iter().zip(&p).position(|(a, b)| a != b).unwrap()
        };
        bad_bool[spread_at] = 7;
        assert!(decode(&bad_bool)
            .unwrap_err()
            .to_string()
            .contains("boolean 7"));
        let mut bad_utf8 = good.clone();
        let name_at = 8 + 8 + 4;
        bad_utf8[name_at] = 0xff;
        assert!(decode(&bad_utf8)
            .unwrap_err()
            .to_string()
            .contains("not UTF-8"));
        let mut unterminated = good;
        unterminated[name_at + 3] = b'!';
        assert!(decode(&unterminated)
            .unwrap_err()
            .to_string()
            .contains("unterminated"));
    }
}
