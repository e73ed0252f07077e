"""The files of a checkpoint directory, and writing them durably.

    DIR/step-000000120/rank-00003.ckpt               rank 3's part of step 120
    DIR/step-000000120/manifest-ranks-00002-00003    the manifest of the host of ranks 2..3

Parts are named by rank and manifests by the ranks of their host, so the
ranks of different hosts never write the same name: DIR may be one directory
per host or one shared by all. A manifest lists the parts its host holds and
is written last, once every rank's part is on disk: it is the commit marker
of that host's share of the step. It is a text file:

    ringd-checkpoint-manifest 1
    step 120
    world 4
    ranks 2 3
    hostname node2
    file rank-00002.ckpt 2 1048640 9f86d081884c7d65...   (name, rank, bytes, SHA-256)
    file rank-00003.ckpt 3 1048640 60303ae22b998861...
    end

Every file is written to a temporary name in its directory, fsynced, renamed
into place, and the directory fsynced: a name is either absent or complete.
"""

import hashlib
import os
import re

PART_SUFFIX = ".ckpt"
TMP_MARK = ".tmp-"
MANIFEST_MAGIC = "ringd-checkpoint-manifest 1"
_STEP_RE = re.compile(r"^step-(\d+)$")
_CHUNK = 1 << 20
_CREATE_TRIES = 10


def step_dir(directory, step):
    return os.path.join(directory, f"step-{step:09d}")


def part_name(rank):
    return f"rank-{rank:05d}{PART_SUFFIX}"


def manifest_name(first, last):
    return f"manifest-ranks-{first:05d}-{last:05d}"


def steps_in(directory):
    """The steps that have a directory in directory, newest first."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    steps = [int(m.group(1)) for m in map(_STEP_RE.match, names) if m]
    return sorted(steps, reverse=True)


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path):
    """Creates path and its parents as needed, each made durable in its
    parent."""
    made = []
    p = os.path.abspath(path)
    while not os.path.isdir(p):
        made.append(p)
        p = os.path.dirname(p)
    for d in reversed(made):
        try:
            os.mkdir(d)
        except FileExistsError:
            if not os.path.isdir(d):
                raise
        fsync_dir(os.path.dirname(d))


def _create(directory, path):
    """Opens path, a new file in directory, for writing, making directory
    first. Tried again if directory vanishes in between: on a shared
    filesystem another host may be removing it, empty, right then (see
    remove_host_step); once the file is in it, it stays."""
    for attempt in range(_CREATE_TRIES):
        make_dirs(directory)
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:
            if attempt + 1 == _CREATE_TRIES:
                raise


def write_atomic(directory, name, chunks, hook=None):
    """Writes the byte chunks to directory/name durably (temporary name,
    fsync, rename, fsync of the directory), making directory if needed.
    hook(path), if given, is called once halfway through (tests pause or
    fail a writer there). Returns (bytes written, SHA-256 hex)."""
    chunks = list(chunks)
    tmp = os.path.join(directory, f"{name}{TMP_MARK}{os.getpid()}")
    sha = hashlib.sha256()
    size = 0
    fd = _create(directory, tmp)
    try:
        with os.fdopen(fd, "wb", buffering=0) as f:
            for i, chunk in enumerate(chunks):
                if hook and i == len(chunks) // 2 and size:
                    hook(tmp)
                view = memoryview(chunk).cast("B")
                sha.update(view)
                while view:
                    n = f.write(view[:_CHUNK])
                    view = view[n:]
                    size += n
            os.fsync(f.fileno())
        os.rename(tmp, os.path.join(directory, name))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(directory)
    return size, sha.hexdigest()


def hash_file(path):
    """(size, SHA-256 hex) of a file."""
    sha = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(_CHUNK)
            if not b:
                return size, sha.hexdigest()
            sha.update(b)
            size += len(b)


class Manifest:
    """One host's manifest of a step: files is a list of (name, rank, size,
    sha256 hex)."""

    def __init__(self, step, world, first, last, hostname, files):
        self.step, self.world, self.first, self.last = step, world, first, last
        self.hostname = hostname
        self.files = files

    @property
    def name(self):
        return manifest_name(self.first, self.last)

    def text(self):
        lines = [MANIFEST_MAGIC, f"step {self.step}", f"world {self.world}",
                 f"ranks {self.first} {self.last}", f"hostname {self.hostname}"]
        lines += [f"file {n} {r} {s} {h}" for n, r, s, h in self.files]
        return "\n".join(lines + ["end"]) + "\n"

    def entry(self, rank):
        for f in self.files:
            if f[1] == rank:
                return f
        return None

    @classmethod
    def parse(cls, text):
        """The Manifest in text; ValueError saying what is wrong."""
        lines = text.split("\n")
        if not lines or lines[0] != MANIFEST_MAGIC:
            raise ValueError("not a ringd checkpoint manifest")
        if "end" not in lines:
            raise ValueError("truncated: no 'end' line")
        fields, files = {}, []
        for line in lines[1 : lines.index("end")]:
            key, _, rest = line.partition(" ")
            if key == "file":
                parts = rest.split(" ")
                if len(parts) != 4 or not re.fullmatch(r"[0-9a-f]{64}", parts[3]):
                    raise ValueError(f"bad line {line!r}")
                files.append((parts[0], int(parts[1]), int(parts[2]), parts[3]))
            elif key in ("step", "world", "ranks", "hostname"):
                fields[key] = rest
            else:
                raise ValueError(f"unknown line {line!r}")
        try:
            first, last = (int(v) for v in fields["ranks"].split(" "))
            m = cls(int(fields["step"]), int(fields["world"]), first, last,
                    fields.get("hostname", ""), files)
        except (KeyError, ValueError):
            raise ValueError("missing or bad step, world or ranks line") from None
        if len(files) != last - first + 1 or sorted(f[1] for f in files) != list(
            range(first, last + 1)
        ):
            raise ValueError(f"lists ranks {[f[1] for f in files]}, expected {first}..{last}")
        return m


def read_manifest(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return Manifest.parse(f.read(1 << 20))


def check_part(directory, step, rank, world, first, last, contents=False):
    """Checks rank's part of step against its host's manifest. Returns the
    manifest entry (name, rank, size, sha256), or with contents=True
    (entry, bytes of the part as a writable uint8 array). Raises
    ValueError naming the file and what is wrong with it."""
    sdir = step_dir(directory, step)
    mpath = os.path.join(sdir, manifest_name(first, last))
    try:
        m = read_manifest(mpath)
    except FileNotFoundError:
        raise ValueError(f"{mpath} is missing: the save of step {step} did not complete") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"{mpath}: {e}") from None
    if m.step != step or m.world != world or (m.first, m.last) != (first, last):
        raise ValueError(
            f"{mpath}: written for step {m.step}, {m.world} ranks, host of ranks "
            f"{m.first}..{m.last}; expected step {step}, {world} ranks, ranks {first}..{last}"
        )
    entry = m.entry(rank)
    path = os.path.join(sdir, entry[0])
    try:
        if contents:
            data = _read_all(path)
            got = (data.size, hashlib.sha256(data).hexdigest())
        else:
            got = hash_file(path)
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror or e}") from None
    if got[0] != entry[2]:
        raise ValueError(f"{path}: {got[0]} bytes, {m.name} says {entry[2]}")
    if got[1] != entry[3]:
        raise ValueError(f"{path}: SHA-256 {got[1][:16]}... differs from {entry[3][:16]}... "
                         f"in {m.name}: the file is damaged")
    return (entry, data) if contents else entry


def _read_all(path):
    """The bytes of path in a writable uint8 array."""
    import numpy as np

    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        buf = np.empty(size, np.uint8)
        n = f.readinto(memoryview(buf)) if size else 0
    return buf[:n]


def remove_manifest(directory, step, first, last):
    """Un-commits the share of step of the host of ranks first..last: removes
    its manifest, durably. False if there was none."""
    sdir = step_dir(directory, step)
    try:
        os.unlink(os.path.join(sdir, manifest_name(first, last)))
    except FileNotFoundError:
        return False
    fsync_dir(sdir)
    return True


def remove_host_step(directory, step, first, last):
    """Removes the host of ranks first..last's share of step: its manifest
    first (the step stops being complete here), then its parts and
    leftover temporary files, then the step directory if nothing else is
    in it (on a shared filesystem the other hosts' files stay)."""
    sdir = step_dir(directory, step)
    mine = {manifest_name(first, last)} | {part_name(r) for r in range(first, last + 1)}
    remove_manifest(directory, step, first, last)
    try:
        names = os.listdir(sdir)
    except FileNotFoundError:
        return
    for n in names:
        if n.split(TMP_MARK)[0] in mine:
            try:
                os.unlink(os.path.join(sdir, n))
            except FileNotFoundError:
                pass
    try:
        os.rmdir(sdir)
    except OSError:
        pass  # another host's files, or a rank saving into it right now
