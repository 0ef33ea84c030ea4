"""Memory history: every change to a group's memory recorded, attributed and revertible.

A bare git repository per group at ``groups/<folder>/.history/`` (beside ``memory/``,
never mounted: the container cannot read or write it), written with dulwich from
content the host reads through the confined file layer. Each commit's tree holds
``memory/...`` and ``learned-behaviors.md``; its message carries the provenance (kind,
message id, channel, chat, sender, trust, session, provider, model, time) as JSON in
an ``Orchestrator-Provenance`` trailer. ``git --git-dir groups/<folder>/.history log``
reads it.

Checking for a change is a stat walk compared with the last snapshot (size, mtime_ns,
ctime_ns per file), kept in ``.history/orchestrator-snapshot.json``: no file is read
unless its status changed. Files over HISTORY_FILE_MAX_BYTES are recorded by their
hash only (a small pointer file in the tree), and ``memory log`` says so.
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import json
import os
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.confined import ConfinedDir, UnsafePath
from orchestrator.errors import BadInput
from orchestrator.fsatomic import write_atomic
from orchestrator.limits import HISTORY_FILE_MAX_BYTES

HISTORY_DIR = ".history"
SNAPSHOT = "orchestrator-snapshot.json"
GAP = "orchestrator-gap.json"  # present while the history could not record
LOCK = "orchestrator.lock"
MEMORY = "memory"
LEARNED = "learned-behaviors.md"
TRAILER = "Orchestrator-Provenance: "
POINTER = b"orchestrator-history: not recorded, over the size limit\n"
REF = b"refs/heads/main"
# kinds of change
TURN, LEARNED_WRITE, MIGRATION, REVERT, HOST, UNATTRIBUTED, OPERATOR, BASELINE = (
    "turn", "learned", "migration", "revert", "host", "unattributed", "operator", "baseline",
)  # fmt: skip
CONSOLIDATION = "consolidation"  # daily notes promoted by orchestrator.memory.consolidate
FLUSH = "flush"  # a memory flush the host opened outside any turn (an idle container's)


class HistoryError(BadInput):
    """A history request that cannot be done as asked."""


@dataclass(frozen=True)
class Provenance:
    kind: str
    sender: str = ""
    trust: str = ""
    message_id: str = ""
    channel: str = ""
    chat: str = ""
    session: str = ""
    provider: str = ""
    model: str = ""
    note: str = ""
    time: float = field(default_factory=time.time)
    also: tuple[str, ...] = ()  # other turns that overlapped this one

    @classmethod
    def of_turn(
        cls, kind: str, message: Any, config: Any, also: tuple[str, ...] = ()
    ) -> Provenance:
        """The provenance of a change made during the turn answering ``message`` (a
        queue Message) in a group configured by ``config``."""
        return cls(
            kind,
            sender=message.sender,
            trust=message.trust,
            message_id=message.id,
            channel=message.channel,
            chat=message.chat,
            session=message.session,
            provider=config.provider,
            model=config.model,
            also=also,
        )

    def summary(self) -> str:
        if self.kind == TURN:
            who = f"{self.sender} ({self.trust})" if self.trust else self.sender
            return f"turn {self.message_id} by {who} via {self.channel}:{self.chat}"
        if self.kind == FLUSH:
            return f"flush of session {self.session} ({self.trust or 'no trust'}): {self.note}"
        if self.note:
            return f"{self.kind}: {self.note}"
        return f"{self.kind} change" + (f" by {self.sender}" if self.sender else "")


@dataclass(frozen=True)
class Gap:
    """The history could not record since ``since`` (the last failure's ``reason``):
    changes found once it records again cannot be told apart, so they are unattributed."""

    since: float
    reason: str
    last: float

    def to_dict(self) -> dict[str, object]:
        return {"since": self.since, "reason": self.reason, "last": self.last}

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since))
        return f"not recording since {when}: {self.reason}"


@dataclass(frozen=True)
class Change:
    rev: str
    provenance: Provenance
    paths: tuple[str, ...]
    hashed_only: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "rev": self.rev,
            **asdict(self.provenance),
            "paths": list(self.paths),
            "hashed_only": list(self.hashed_only),
        }


def _closing(method: Any) -> Any:
    """Close the repository (its pack files) when the outermost public call ends."""
    import functools

    @functools.wraps(method)
    def wrapper(self: History, *args: Any, **kwargs: Any) -> Any:
        self._depth += 1
        try:
            return method(self, *args, **kwargs)
        finally:
            self._depth -= 1
            if self._depth == 0 and self._open_repo is not None:
                self._open_repo.close()
                self._open_repo = None

    return wrapper


def _reading(method: Any) -> Any:
    """A read of the history waits for a record in progress (``History.hold``): a turn's
    change is in the history before any history command answers."""
    import functools

    @functools.wraps(method)
    def wrapper(self: History, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            if not self.path.is_dir():  # nothing recorded, nothing being recorded
                return method(self, *args, **kwargs)
            with self._flock():
                return method(self, *args, **kwargs)

    return _closing(wrapper)


# A file's status as the check compares it.
Stat = tuple[int, int, int]


def _status(st: os.stat_result) -> Stat:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class History:
    """One group's history. Thread-safe; across processes a flock serializes writers."""

    def __init__(
        self, groups_dir: Path, folder: str, max_file_bytes: int = HISTORY_FILE_MAX_BYTES
    ) -> None:
        self.groups_dir = groups_dir
        self.folder = folder
        self.path = groups_dir / folder / HISTORY_DIR
        self.max_file_bytes = max_file_bytes
        self._lock = threading.RLock()  # held with the flock (see ``hold``)
        self._flock_depth = 0  # the flock is taken once however deeply ``hold`` nests
        self._snapshot: dict[str, Any] | None = None
        self._snapshot_stamp: tuple[int, int] | None = None
        self._running = True  # the container's state noted with the next snapshot
        self._open_repo: Any = None
        self._depth = 0

    # the cheap check

    def scan(self) -> dict[str, Stat]:
        """Every regular file of memory/ and the learned behaviors, with its status; a
        walk of stat calls through the confined layer, reading nothing."""
        found: dict[str, Stat] = {}
        with ConfinedDir.open(self.groups_dir, self.folder) as group:
            st = group.lstat(LEARNED)
            if st is not None and stat.S_ISREG(st.st_mode):
                found[LEARNED] = _status(st)
            try:
                memory = group.open_dir(MEMORY)
            except OSError:
                return found
            with memory:
                for rel, _folder, entries in memory.walk():
                    for entry in entries:
                        try:
                            est = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if stat.S_ISREG(est.st_mode):
                            name = f"{rel}/{entry.name}" if rel else entry.name
                            found[f"{MEMORY}/{name}"] = _status(est)
        return found

    def changed(self, scanned: dict[str, Stat] | None = None) -> bool:
        """Whether memory differs from the last snapshot by status (cheap: no reads)."""
        scanned = self.scan() if scanned is None else scanned
        files = self._files()
        if set(files) != set(scanned):
            return True
        return any(tuple(files[p][:3]) != s for p, s in scanned.items())

    # recording

    @_closing
    def record(self, provenance: Provenance, *, container_running: bool = True) -> Change | None:
        """Commit what changed since the last snapshot, attributed to ``provenance``;
        None when nothing did (by status, or by content). ``container_running`` is noted
        in the snapshot (see outside_turn). A failure is noted as a gap (see ``gap``)
        and raised."""
        with self._recording(), self._lock, self._flock():
            scanned = self.scan()
            if not self.changed(scanned):
                if self._snapshot_info().get("container_running", True) != container_running:
                    self._note_container(container_running)
                self._end_gap(self.gap())  # recording works, and nothing went unrecorded
                return None
            self._running = container_running
            return self._commit(scanned, provenance)

    @_closing
    def record_outside(self, container: Any | None) -> Change | None:
        """Record a change made outside any turn (checked before a turn and by the
        memory commands), attributed by outside_turn."""
        with self._recording(), self._lock, self._flock():
            scanned = self.scan()
            running = container not in (None, "unknown") and bool(container.running)
            if not self.changed(scanned):
                return None
            self._running = running
            return self._commit(scanned, outside_turn(self, container))

    # a history that cannot record says so, and since when

    def gap(self) -> Gap | None:
        """Since when the history has not been able to record, or None."""
        try:
            data = json.loads((self.path / GAP).read_text())
            return Gap(float(data["since"]), str(data["reason"]), float(data["last"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    @contextmanager
    def _recording(self) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            self._note_gap(exc)
            raise

    def _note_gap(self, exc: BaseException) -> None:
        reason = f"{type(exc).__name__}: {exc}"[:500]
        known = self.gap()
        now = time.time()
        gap = Gap(known.since if known else now, reason, now)
        try:
            self.path.mkdir(mode=0o700, exist_ok=True)
            write_atomic(self.path / GAP, json.dumps(gap.to_dict()), mode=0o600)
        except OSError:
            pass  # the history folder itself is unusable: the log says so

    def _after_gap(self, provenance: Provenance) -> Provenance:
        """After a gap nobody can tell which turn made which change: what is found is
        unattributed (the turn it would have gone to is named in the note)."""
        gap = self.gap()
        if gap is None or provenance.kind in (UNATTRIBUTED, BASELINE):
            return provenance
        return Provenance(
            UNATTRIBUTED,
            note=f"found after a gap in the history ({gap.describe()}); it would have been "
            f"recorded as {provenance.summary()}",
            time=provenance.time,
        )

    def _snapshot_info(self) -> dict[str, Any]:
        self._files()
        return self._snapshot or {}

    def _note_container(self, running: bool) -> None:
        info = dict(self._snapshot_info())
        if not info:
            return
        info["container_running"] = running
        write_atomic(self.path / SNAPSHOT, json.dumps(info), mode=0o600)
        self._snapshot = None

    def _commit(self, scanned: dict[str, Stat], provenance: Provenance) -> Change | None:
        from dulwich.objects import Blob

        gap = self.gap()
        provenance = self._after_gap(provenance)
        repo = self._repo()
        files = self._files()
        blobs: dict[str, bytes] = {}  # path -> blob id (hex)
        hashed_only: list[str] = []
        fresh: dict[str, list[object]] = {}
        with ConfinedDir.open(self.groups_dir, self.folder) as group:
            for path, status in scanned.items():
                known = files.get(path)
                if known is not None and tuple(known[:3]) == status:
                    blobs[path] = str(known[3]).encode()
                    fresh[path] = list(known)
                    continue
                try:
                    data = group.read_bytes(path, self.max_file_bytes + 1, truncate=True)
                    if len(data) > self.max_file_bytes:
                        digest, size = group.sha256(path)
                        data = POINTER + f"sha256 {digest}; {size} bytes\n".encode()
                        hashed_only.append(path)
                except (OSError, UnsafePath):
                    continue  # gone, or not a regular file now: left out
                blob = Blob.from_string(data)
                repo.object_store.add_object(blob)
                blobs[path] = blob.id
                fresh[path] = [*status, blob.id.decode()]
        tree = _tree(repo, blobs)
        head = self._head(repo)
        parent_tree = repo[head].tree if head is not None else None
        if parent_tree == tree:
            self._save_snapshot(head, fresh)
            self._end_gap(gap)
            return None
        paths = _changed_paths(repo, parent_tree, tree)
        rev = self._write_commit(repo, tree, head, provenance, hashed_only)
        self._save_snapshot(rev, fresh)
        self._end_gap(gap)
        return Change(rev.decode(), provenance, tuple(paths), tuple(hashed_only))

    def _end_gap(self, gap: Gap | None) -> None:
        if gap is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path / GAP)

    def _write_commit(
        self,
        repo: Any,
        tree: bytes,
        head: bytes | None,
        provenance: Provenance,
        hashed_only: list[str],
    ) -> bytes:
        from dulwich.objects import Commit

        commit: Any = Commit()
        commit.tree = tree
        commit.parents = [head] if head is not None else []
        who = (provenance.sender or provenance.kind).replace("<", "").replace(">", "")
        commit.author = f"{who} <{provenance.kind}@orchestrator>".encode()
        commit.committer = b"orchestrator <orchestrator@localhost>"
        commit.author_time = commit.commit_time = int(provenance.time)
        commit.author_timezone = commit.commit_timezone = 0
        body = {**asdict(provenance), "hashed_only": hashed_only}
        commit.message = (
            provenance.summary() + "\n\n" + TRAILER + json.dumps(body, sort_keys=True) + "\n"
        ).encode()
        repo.object_store.add_object(commit)
        repo.refs[REF] = commit.id
        return bytes(commit.id)

    # reading

    @_reading
    def log(
        self, path: str | None = None, sender: str | None = None, since: float | None = None
    ) -> list[Change]:
        """Changes, newest first; only those touching ``path`` (a file or folder of the
        tree), by ``sender``, or at or after ``since`` when given."""
        repo = self._repo_if_any()
        if repo is None:
            return []
        out: list[Change] = []
        rev = self._head(repo)
        while rev is not None:
            commit = repo[rev]
            provenance, hashed = _provenance(commit)
            parent = commit.parents[0] if commit.parents else None
            parent_tree = repo[parent].tree if parent is not None else None
            paths = _changed_paths(repo, parent_tree, commit.tree)
            keep = (
                (
                    path is None
                    or any(p == path or p.startswith(path.rstrip("/") + "/") for p in paths)
                )
                and (sender is None or provenance.sender == sender)
                and (since is None or provenance.time >= since)
            )
            if keep:
                out.append(Change(rev.decode(), provenance, tuple(paths), tuple(hashed)))
            if since is not None and provenance.time < since:
                break
            rev = parent
        return out

    @_reading
    def resolve(self, rev: str) -> bytes:
        """A full commit id from a prefix (at least 4 hex digits) or HEAD."""
        repo = self._repo_if_any()
        if repo is None:
            raise HistoryError(f"group {self.folder!r} has no history yet")
        head = self._head(repo)
        if rev.upper() == "HEAD" and head is not None:
            return head
        matches = [c for c in self._revs(repo) if c.decode().startswith(rev.lower())]
        if len(rev) < 4 or not matches:
            raise HistoryError(
                f"no change {rev!r} in the history of {self.folder!r}",
                hint=f"see the changes with: orchestrator memory log {self.folder}",
            )
        if len(matches) > 1:
            raise HistoryError(f"{rev!r} names {len(matches)} changes; give more of it")
        return matches[0]

    @_reading
    def show(self, rev: str, path: str | None = None) -> bytes | list[str]:
        """A file's bytes at ``rev``, or (without ``path``) the files of its tree."""
        repo = self._repo()
        tree = _flat(repo, repo[self.resolve(rev)].tree)
        if path is None:
            return sorted(tree)
        if path not in tree:
            raise HistoryError(f"{path} is not in change {rev}")
        return bytes(repo[tree[path]].data)

    @_reading
    def diff(self, old: str | None = None, new: str | None = None) -> str:
        """A unified diff between two changes (default: the last one and its parent), or
        between a change and memory now when ``new`` is "now"."""
        repo = self._repo()
        new_rev = self.resolve(new or "HEAD") if new != "now" else None
        if old is None:
            base = repo[new_rev or self.resolve("HEAD")]
            old_rev = base.parents[0] if base.parents else None
        else:
            old_rev = self.resolve(old)
        before = _flat(repo, repo[old_rev].tree) if old_rev is not None else {}
        after = _flat(repo, repo[new_rev].tree) if new_rev is not None else self._now_blobs(repo)
        out: list[str] = []
        for path in sorted(set(before) | set(after)):
            a, b = before.get(path), after.get(path)
            if a == b:
                continue
            old_text = _text(repo[a].data) if a else []
            new_text = _text(repo[b].data) if b else []
            out.extend(
                difflib.unified_diff(
                    old_text, new_text, f"a/{path}" if a else "/dev/null",
                    f"b/{path}" if b else "/dev/null", lineterm="",
                )
            )  # fmt: skip
        return "\n".join(out) + ("\n" if out else "")

    @_reading
    def blame(self, path: str) -> list[tuple[str, Change]]:
        """Each line of ``path`` now (as last recorded), with the change that wrote it."""
        repo = self._repo()
        chain = list(reversed(self.log()))  # oldest first
        if not chain:
            raise HistoryError(f"group {self.folder!r} has no history yet")
        lines: list[tuple[str, Change]] = []
        for change in chain:
            tree = _flat(repo, repo[change.rev.encode()].tree)
            blob = tree.get(path)
            text = _text(repo[blob].data) if blob else []
            matcher = difflib.SequenceMatcher(a=[t for t, _ in lines], b=text, autojunk=False)
            updated: list[tuple[str, Change]] = []
            for op, a0, a1, b0, b1 in matcher.get_opcodes():
                if op == "equal":
                    updated.extend(lines[a0:a1])
                else:
                    updated.extend((t, change) for t in text[b0:b1])
            lines = updated
        if not lines and path not in _flat(repo, repo[chain[-1].rev.encode()].tree):
            raise HistoryError(f"{path} is not in the last recorded change of {self.folder!r}")
        return lines

    # reverting

    @_closing
    def revert_plan(
        self, revs: list[str], path: str | None = None
    ) -> tuple[dict[str, bytes | None], list[str]]:
        """What undoing ``revs`` (newest first) writes: path -> content (None: delete),
        and the conflicts: files changed after one of those changes (then nothing is
        written)."""
        repo = self._repo()
        now = _flat(repo, repo[self.resolve("HEAD")].tree)
        wanted: dict[str, bytes | None] = {}
        expected: dict[str, bytes | None] = {}  # what each file must be now to revert
        conflicts: list[str] = []
        for rev in revs:  # newest first
            commit = repo[self.resolve(rev)]
            after = _flat(repo, commit.tree)
            before = _flat(repo, repo[commit.parents[0]].tree) if commit.parents else {}
            for p in sorted(set(before) | set(after)):
                if before.get(p) == after.get(p):
                    continue
                if path is not None and p != path and not p.startswith(path.rstrip("/") + "/"):
                    continue
                expected.setdefault(p, after.get(p))  # the newest decides what is there now
                wanted[p] = before.get(p)  # the oldest decides what comes back
        for p, blob in expected.items():
            if now.get(p) != blob:
                conflicts.append(p)
        content = {p: (repo[b].data if b is not None else None) for p, b in wanted.items()}
        return content, conflicts

    @_closing
    def apply(self, content: dict[str, bytes | None], provenance: Provenance) -> Change | None:
        """Write ``content`` through the confined layer (after recording anything
        pending), then record it as one change."""
        with self._recording(), self._lock, self._flock():
            scanned = self.scan()
            if self.changed(scanned):
                self._commit(scanned, Provenance(UNATTRIBUTED, note="found before a revert"))
            with ConfinedDir.open(self.groups_dir, self.folder) as group:
                for path, data in sorted(content.items()):
                    if data is None:
                        if group.lstat(path) is not None:
                            group.unlink(path)
                        continue
                    if data.startswith(POINTER):
                        continue  # recorded by hash only: its bytes cannot come back
                    parent = path.rpartition("/")[0]
                    if parent:
                        group.open_dir(parent, create=True, owner="inherit").close()
                    group.write_atomic(path, data)
            return self._commit(self.scan(), provenance)

    # pruning

    @_closing
    def prune(self, before: float) -> tuple[int, int]:
        """Fold every change older than ``before`` into one root change holding the tree
        they left, replay the later ones on it, and delete what nothing reaches any more.
        Returns (changes folded, bytes freed). History is rewritten: only on request."""
        from dulwich.gc import garbage_collect

        with self._lock, self._flock():
            repo = self._repo_if_any()
            if repo is None:
                return 0, 0
            chain = list(self._revs(repo))  # newest first
            split = next(
                (i for i, r in enumerate(chain) if repo[r].commit_time < before), len(chain)
            )
            kept, folded = chain[:split], chain[split:]  # the newest change before the
            # cutoff and everything older are folded, whatever their times
            if len(folded) <= 1:
                return 0, 0
            size = _disk_bytes(self.path)
            base = repo[folded[0]]
            root = self._write_commit(
                repo,
                base.tree,
                None,
                Provenance(
                    BASELINE,
                    note=f"{len(folded)} changes before "
                    f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(before))} UTC pruned",
                    time=float(base.commit_time),
                ),
                [],
            )
            parent = root
            for rev in reversed(kept):
                old = repo[rev]
                copy = old.copy()
                copy.parents = [parent]
                repo.object_store.add_object(copy)
                parent = copy.id
            repo.refs[REF] = parent
            garbage_collect(repo, grace_period=0)
            head = self._files()
            self._save_snapshot(bytes(parent), head)
            return len(folded), max(0, size - _disk_bytes(self.path))

    # the repository and the snapshot

    def _repo_if_any(self) -> Any:
        from dulwich.repo import Repo

        if self._open_repo is None:
            if not (self.path / "HEAD").exists():
                return None
            self._open_repo = Repo(str(self.path))
        return self._open_repo

    def _repo(self) -> Any:
        from dulwich.repo import Repo

        repo = self._repo_if_any()
        if repo is None:
            self.path.mkdir(mode=0o700, exist_ok=True)
            repo = self._open_repo = Repo.init_bare(str(self.path))
            refs: Any = repo.refs
            refs.set_symbolic_ref(b"HEAD", REF)
        return repo

    @staticmethod
    def _head(repo: Any) -> bytes | None:
        try:
            return bytes(repo.refs[REF])
        except KeyError:
            return None

    def _revs(self, repo: Any) -> Iterator[bytes]:
        rev = self._head(repo)
        while rev is not None:
            yield rev
            parents = repo[rev].parents
            rev = parents[0] if parents else None

    def _now_blobs(self, repo: Any) -> dict[str, bytes]:
        from dulwich.objects import Blob

        out: dict[str, bytes] = {}
        with ConfinedDir.open(self.groups_dir, self.folder) as group:
            for path in self.scan():
                try:
                    data = group.read_bytes(path, self.max_file_bytes + 1, truncate=True)
                except OSError:
                    continue
                if len(data) > self.max_file_bytes:
                    digest, size = group.sha256(path)
                    data = POINTER + f"sha256 {digest}; {size} bytes\n".encode()
                blob = Blob.from_string(data)
                repo.object_store.add_object(blob)
                out[path] = bytes(blob.id)
        return out

    def _files(self) -> dict[str, list[Any]]:
        """The last snapshot's files: path -> [size, mtime_ns, ctime_ns, blob]."""
        file = self.path / SNAPSHOT
        try:
            st = file.stat()
        except FileNotFoundError:
            return {}
        stamp = (st.st_mtime_ns, st.st_size)
        if self._snapshot is None or self._snapshot_stamp != stamp:
            self._snapshot = json.loads(file.read_text())
            self._snapshot_stamp = stamp
        files: dict[str, list[Any]] = self._snapshot.get("files", {})
        return files

    def _save_snapshot(self, head: bytes | None, files: dict[str, list[object]]) -> None:
        data = {
            "head": head.decode() if head else None,
            "time": time.time(),
            "container_running": self._running,
            "files": files,
        }
        write_atomic(self.path / SNAPSHOT, json.dumps(data), mode=0o600)
        self._snapshot = None

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the history (this process's threads and, by its flock, other processes)
        across several steps: the daemon holds it from a turn's end, while its replies go
        out, until the turn's change is recorded, so no history command or other record
        sees that change first. Records made inside take it again without waiting."""
        with self._lock, self._flock():
            yield

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold the history against every writer, in this process and in others (the
        daemon), while it is read whole (a backup); a group without a history yet gets
        none made."""
        if not self.path.is_dir():
            yield
            return
        with self.hold():
            yield

    @contextmanager
    def _flock(self) -> Iterator[None]:
        # called with self._lock held: the depth is this thread's own
        if self._flock_depth:
            self._flock_depth += 1
            try:
                yield
            finally:
                self._flock_depth -= 1
            return
        self.path.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._flock_depth = 1
            try:
                yield
            finally:
                self._flock_depth = 0
        finally:
            os.close(fd)


def _disk_bytes(root: Path) -> int:
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                continue
    return total


def _tree(repo: Any, blobs: dict[str, bytes]) -> bytes:
    """Write the nested trees for ``blobs`` (path -> blob id); the root tree's id."""
    from dulwich.objects import Tree

    children: dict[str, dict[str, bytes]] = {}
    for path, blob in blobs.items():
        parent, _, name = path.rpartition("/")
        children.setdefault(parent, {})[name] = blob
        while parent:
            up = parent.rpartition("/")[0]
            children.setdefault(up, {})
            parent = up

    def build(prefix: str) -> bytes:
        tree: Any = Tree()
        for name, blob in children.get(prefix, {}).items():
            tree.add(os.fsencode(name), 0o100644, blob)  # names are bytes: kept as they are
        subfolders = {
            p.rpartition("/")[2] for p in children if p and p.rpartition("/")[0] == prefix
        }
        for name in subfolders:
            tree.add(os.fsencode(name), 0o040000, build(f"{prefix}/{name}" if prefix else name))
        repo.object_store.add_object(tree)
        return bytes(tree.id)

    return build("")


def _flat(repo: Any, tree_id: bytes | None, prefix: str = "") -> dict[str, bytes]:
    if tree_id is None:
        return {}
    out: dict[str, bytes] = {}
    for entry in repo[tree_id].items():
        name = os.fsdecode(entry.path)  # a name that is not UTF-8 keeps its bytes
        path = f"{prefix}/{name}" if prefix else name
        if stat.S_ISDIR(entry.mode):
            out.update(_flat(repo, entry.sha, path))
        else:
            out[path] = bytes(entry.sha)
    return out


def _changed_paths(repo: Any, old: bytes | None, new: bytes) -> list[str]:
    before, after = _flat(repo, old), _flat(repo, new)
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def _provenance(commit: Any) -> tuple[Provenance, list[str]]:
    text = commit.message.decode("utf-8", "replace")
    for line in text.splitlines():
        if line.startswith(TRAILER):
            data = json.loads(line[len(TRAILER) :])
            hashed = data.pop("hashed_only", [])
            data["also"] = tuple(data.get("also", ()))
            return Provenance(**data), hashed
    return Provenance(UNATTRIBUTED, note=text.splitlines()[0] if text else ""), []


def _text(data: bytes) -> list[str]:
    return data.decode("utf-8", "replace").splitlines()


def open_history(groups_dir: Path, folder: str) -> History:
    return History(groups_dir, folder)


# Attribution of changes made outside any turn. The snapshot notes whether the group's
# container was running when it was taken; a change found later is the host's only
# when the container is not running now, was not then, and has not started since.
# Anything else is unattributed: a container can write between turns, and its writes
# must never pass for the operator's.


def outside_turn(history: History, container: Any | None) -> Provenance:
    """The provenance of a change found outside any turn; ``container`` is the group's
    ContainerInfo now (None: there is none), or the string "unknown" when the engine
    could not be asked."""
    snapshot = history._snapshot_info()
    if not snapshot:
        return Provenance(BASELINE, note="the memory as first recorded")
    was_running = bool(snapshot.get("container_running", True))
    taken = float(snapshot.get("time") or 0.0)
    if container == "unknown":
        return Provenance(UNATTRIBUTED, note="found outside a turn; the engine was not reachable")
    running_now = container is not None and container.running
    started_since = container is not None and (container.started_at or 0.0) >= taken
    if not running_now and not was_running and not started_since:
        return Provenance(
            HOST, sender="operator", note="made on the host while the container was stopped"
        )
    return Provenance(UNATTRIBUTED, note="made outside a turn while the container could run")


def record_quietly(
    groups_dir: Path,
    folder: str,
    provenance: Provenance,
    max_file_bytes: int = HISTORY_FILE_MAX_BYTES,
) -> Change | None:
    """Record a change made by the host (a learned-behaviors write, a migration, a
    command); a failure is logged, never raised: the change itself has happened."""
    import logging

    try:
        change: Change | None = History(groups_dir, folder, max_file_bytes).record(provenance)
        return change
    except Exception as exc:
        logging.getLogger("orchestrator.history").warning(
            "memory history of %s not recorded (%s): %s", folder, provenance.kind, exc
        )
        return None
