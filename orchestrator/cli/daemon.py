"""The daemon and messages: serve, up, down, send, chat, retry."""

from __future__ import annotations

import contextlib
import sys
import threading
import time

import click

from orchestrator.cli import CliContext, report_error
from orchestrator.cli.output import print_error, print_json, safe_line, safe_text
from orchestrator.errors import EXIT_FAILED, EXIT_OK, EXIT_PENDING
from orchestrator.versions import EARLIEST, RELEASE

pass_cli = click.make_pass_decorator(CliContext)
FOLLOW_INTERVAL_SECONDS = 1.0  # how often `chat` looks for replies of scheduled tasks
_OUTPUT = threading.Lock()  # one writer to the terminal at a time


@click.command()
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Log lines on stderr: for people or for machines.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Turns running at once across groups (default: `concurrency` in "
    "orchestrator.yaml, else 4 per CPU and at least 8: turns mostly wait on models).",
)
@pass_cli
def serve(obj: CliContext, log_format: str, concurrency: int | None) -> None:
    """Run the daemon in the foreground: channels, queue, delivery into containers.

    With --debug (before the command: orchestrator --debug serve) it logs at DEBUG;
    tokens and keys are redacted from every line either way.

    Reconciles containers at start. SIGTERM drains: no new messages, turns in flight
    finish (or are delivered again at the next start), then it exits.
    """
    from orchestrator.service import serve as run
    from orchestrator.service import setup_logging

    setup_logging(log_format, debug=obj.debug)
    run(obj.home, concurrency)


def describe_daemon(facts: dict[str, object]) -> str:
    """'pid 123, up 5m, HTTP on http://127.0.0.1:8787' from daemon.json's facts."""
    import time

    from orchestrator.units import human_seconds

    parts = [f"release {facts.get('release') or EARLIEST}", f"pid {facts.get('pid')}"]
    started = facts.get("started")
    if isinstance(started, int | float):
        parts.append(f"up {human_seconds(time.time() - started)}")
    channels = facts.get("channels")
    if isinstance(channels, dict):
        http = channels.get("http")
        parts.append(f"HTTP on {http}" if http else "HTTP off")
    return ", ".join(parts)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@pass_cli
def up(obj: CliContext, as_json: bool) -> None:
    """Start the daemon in the background (log: state/orchestrator.log; at DEBUG with
    orchestrator --debug up).

    When a daemon already runs for this home it says so and starts nothing; while a
    daemon is stopping (it holds the home's lock but does not answer) it refuses.
    """
    from orchestrator.service import up as start

    result = start(obj.home, debug=obj.debug)
    upgrade = result.facts.get("upgrade") if result.started else None
    done = upgrade.get("done") if isinstance(upgrade, dict) else None
    if as_json:
        print_json({"pid": result.pid, "started": result.started, "daemon": result.facts})
        return
    if result.started:
        click.echo(f"orchestrator daemon running ({describe_daemon(result.facts)})")
    else:
        click.echo(f"a daemon already runs for this home ({describe_daemon(result.facts)})")
        if result.facts.get("release") != RELEASE:
            click.echo(
                f"it runs release {result.facts.get('release') or EARLIEST}, this command "
                f"{RELEASE}: restart it to upgrade (orchestrator down, then orchestrator up)"
            )
    if isinstance(upgrade, dict) and done:
        click.echo(
            f"upgraded this home from {upgrade.get('previous')} to {upgrade.get('release')}:"
        )
        for line in done:
            click.echo(f"  {safe_line(str(line.get('what')))}")
        click.echo("see CHANGELOG.md for what an operator must know about each release")


@click.command()
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Also stop this home's group containers (otherwise they stay up until idle).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@pass_cli
def down(obj: CliContext, everything: bool, as_json: bool) -> None:
    """Stop the background daemon. It drains first (turns in flight finish, for up to
    30 s); one that does not stop gets SIGTERM again (it stops at once), then SIGKILL.
    Nothing queued is lost either way: turns cut short are delivered at the next start.
    Says which group containers it left running; --all stops them too."""
    from orchestrator.service import down as stop

    result = stop(obj.home)
    containers = _running_containers(obj)
    stopped: list[str] = []
    if everything and containers:
        from orchestrator.cli.runtime import open_runtime

        runtime = open_runtime(obj)
        for name in containers:
            runtime.backend.stop(name)
            stopped.append(name)
    left = [] if everything else containers
    if as_json:
        print_json(
            {
                "pid": result.pid,
                "steps": result.steps,
                "forced": result.forced,
                "stopped_containers": stopped,
                "left_running": left,
            }
        )
        return
    if result.pid is None:
        click.echo("no daemon was running")
    else:
        click.echo(f"stopped daemon {result.pid} ({'; '.join(result.steps)})")
    if stopped:
        click.echo(f"stopped {len(stopped)} group containers: {', '.join(stopped)}")
    if left:
        click.echo(
            f"left running: {', '.join(left)} (they stop when idle; to stop them now: "
            "orchestrator down --all)"
        )


def _running_containers(obj: CliContext) -> list[str]:
    """Names of this home's running group containers; [] when the engine is away."""
    from orchestrator.config import load_config
    from orchestrator.errors import EngineUnreachable
    from orchestrator.runtime import open_backend
    from orchestrator.runtime.base import LABEL_HOME

    try:
        backend = open_backend(load_config(obj.home), timeout=10, home=obj.home)
    except EngineUnreachable:
        return []
    return sorted(c.name for c in backend.list({LABEL_HOME: obj.home.identity}) if c.running)


def _send(
    obj: CliContext,
    name: str,
    text: str,
    chat: str,
    sender: str,
    thread: str | None,
    timeout: float,
    *,
    show_replies: bool = True,
    as_json: bool = False,
) -> dict[str, object]:
    """Send through the daemon and wait; replies are printed as they are stored (unless
    ``show_replies`` is off). Returns the final message."""
    from orchestrator.service.client import control_stream

    request = {
        "op": "send",
        "group": name,
        "text": text,
        "chat": chat,
        "sender": sender,
        "thread": thread,
        "stream": True,
        "timeout": timeout,
    }
    shown = 0
    for frame in control_stream(obj.home, request, timeout=timeout + 30):
        if "reply" in frame:
            if show_replies:
                click.echo(safe_text(str(frame["reply"].get("text", ""))))
                file = frame["reply"].get("file")
                if isinstance(file, dict):
                    click.echo(f"file: {safe_text(str(file.get('path')))}")
            shown += 1
            continue
        if not frame.get("ok"):
            report_error(str(frame.get("error")), frame.get("hint"), as_json=as_json)
            raise SystemExit(int(frame.get("exit") or EXIT_FAILED))
        message: dict[str, object] = frame["message"]
        message["shown"] = shown
        return message
    raise AssertionError("unreachable")


def _print_outcome(message: dict[str, object]) -> int:
    """Print the replies not shown yet and the outcome; the exit code: EXIT_FAILED for a
    dead letter, EXIT_PENDING when the answer is not complete yet."""
    found = message.get("replies")
    replies = list(found) if isinstance(found, list) else []
    shown = message.pop("shown", 0)
    found_files = message.get("files")
    files = {f.get("reply"): f for f in (found_files if isinstance(found_files, list) else [])}
    first = shown if isinstance(shown, int) else 0
    for place, reply in enumerate(replies[first:], first):
        click.echo(safe_text(str(reply)))
        if place in files:
            click.echo(f"file: {safe_text(str(files[place].get('path')))}")
    if message.get("state") == "dead":
        print_error(
            f"message {message['id']} could not be delivered: {message.get('error')}",
            f"fix the cause, then: orchestrator retry {message['id']}",
        )
        return EXIT_FAILED
    if message.get("state") != "done":
        click.echo(
            f"note: message {message['id']} is still {message.get('state')}; "
            "its replies will be stored when it is answered "
            f"(orchestrator message {message['id']})",
            err=True,
        )
        return EXIT_PENDING
    if not replies:
        click.echo("(no reply)")
    return EXIT_OK


@click.command()
@click.argument("name")
@click.argument("text")
@click.option("--chat", default="cli", show_default=True, help="Chat id (selects the session).")
@click.option("--thread", default=None, help="Thread id (for per-thread groups).")
@click.option("--sender", default="operator", show_default=True, help="Sender id.")
@click.option(
    "--timeout",
    type=float,
    default=300.0,
    show_default=True,
    help="Seconds to wait for the answer; exit code 3 when it is not complete by then "
    "(its replies are stored when it is).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the message and replies as JSON.")
@pass_cli
def send(
    obj: CliContext,
    name: str,
    text: str,
    chat: str,
    thread: str | None,
    sender: str,
    timeout: float,
    as_json: bool,
) -> None:
    """Send TEXT to group NAME through the daemon and print the replies.

    \b
    Example:
      orchestrator send family "remember that my timezone is Europe/Berlin"
    """
    message = _send(
        obj, name, text, chat, sender, thread, timeout, show_replies=not as_json, as_json=as_json
    )
    if as_json:
        message.pop("shown", None)
        print_json(message)
        if message.get("state") == "dead":
            raise SystemExit(EXIT_FAILED)
        if message.get("state") != "done":
            raise SystemExit(EXIT_PENDING)
        return
    if code := _print_outcome(message):
        raise SystemExit(code)


@click.command()
@click.argument("name")
@click.option("--chat", default="cli-chat", show_default=True, help="Chat id.")
@click.option("--sender", default="operator", show_default=True, help="Sender id.")
@pass_cli
def chat(obj: CliContext, name: str, chat: str, sender: str) -> None:
    """Talk with group NAME interactively, with line editing and history.

    \b
      /clear    start a fresh context (memory is loaded again)
      /approve ID  apply the request ID waiting in this chat for a creator
      /confirm  the same, when exactly one request waits here
      /status   the daemon's queue
      /exit     leave (or Ctrl-D)

    Replies of scheduled tasks that run in this chat while it is open (a reminder
    set with "remind me in 10 minutes to ...") show as they arrive, marked [task N].
    """
    from orchestrator.groups import GroupStore
    from orchestrator.service.client import control_request

    folder = GroupStore(obj.home).find(name).folder  # an unknown group: exit 2 before anything
    control_request(obj.home, {"op": "ping"}, timeout=5)
    interactive = sys.stdin.isatty()
    if interactive:
        _line_editing(obj)
    click.echo(f"chatting with {folder} as {sender!r} (chat {chat!r}); /exit or Ctrl-D to leave")
    stop = threading.Event()
    follower = threading.Thread(
        target=_follow,
        args=(obj, folder, chat, time.time(), stop, f"{sender}> " if interactive else ""),
        name="follow",
        daemon=True,
    )
    follower.start()
    try:
        _chat_loop(obj, folder, chat, sender, interactive)
    finally:
        stop.set()
        follower.join(5)


def _follow(
    obj: CliContext, folder: str, chat: str, since: float, stop: threading.Event, prompt: str
) -> None:
    """Print the replies of scheduled tasks that run in this chat, as they arrive."""
    from orchestrator.errors import OrchestratorError
    from orchestrator.service.client import control_request

    shown: dict[str, int] = {}
    finished: set[str] = set()
    while not stop.wait(FOLLOW_INTERVAL_SECONDS):
        try:
            answer = control_request(
                obj.home, {"op": "follow", "group": folder, "chat": chat, "since": since}
            )
        except (OrchestratorError, OSError):
            continue  # the daemon restarting: the next poll catches up
        for run in answer.get("runs") or []:
            message_id = str(run.get("id"))
            if message_id in finished:
                continue
            replies = [str(r) for r in run.get("replies") or []]
            new = replies[shown.get(message_id, 0) :]
            if new:
                with _OUTPUT:
                    for reply in new:
                        click.echo(f"\r[task {run.get('task')}] {safe_text(reply)}")
                    if prompt:
                        click.echo(prompt, nl=False)
            shown[message_id] = len(replies)
            if run.get("state") in ("done", "dead"):
                finished.add(message_id)


def _chat_loop(obj: CliContext, folder: str, chat: str, sender: str, interactive: bool) -> None:
    from orchestrator.service.client import control_request

    while True:
        try:
            text = input(f"{sender}> ") if interactive else sys.stdin.readline()
        except EOFError:
            click.echo()
            break
        except UnicodeDecodeError:
            print_error("that line is not valid UTF-8 text; it was not sent")
            continue
        if not interactive and not text:
            break
        text = text.strip()
        if not text:
            continue
        if text == "/exit":
            break
        if text == "/status":
            answer = control_request(obj.home, {"op": "status"})
            counts = answer.get("counts") or {}
            click.echo(
                f"queue: {counts.get('queued', 0)} queued, {answer.get('inflight', 0)} in "
                f"flight, {counts.get('done', 0)} done, {counts.get('dead', 0)} dead"
            )
            continue
        try:
            message = _send(obj, folder, text, chat, sender, None, 300.0)
        except SystemExit:
            if not interactive:
                raise  # a script's line refused: it ends with the refusal's exit code
            continue  # the daemon refused this line (said on stderr); the chat goes on
        with _OUTPUT:
            _print_outcome(message)


def _line_editing(obj: CliContext) -> None:
    """readline's editing and a history kept in state/chat-history."""
    import atexit

    try:
        import readline
    except ImportError:  # a Python built without it: plain input
        return
    history = obj.home.state_dir / "chat-history"
    with contextlib.suppress(OSError):
        readline.read_history_file(history)
    readline.set_history_length(1000)

    def save() -> None:
        with contextlib.suppress(OSError):
            readline.write_history_file(history)

    atexit.register(save)


@click.command()
@click.argument("message_id")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@pass_cli
def retry(obj: CliContext, message_id: str, as_json: bool) -> None:
    """Queue a dead-lettered message again (see `orchestrator status`)."""
    from orchestrator.service.client import control_request

    answer = control_request(obj.home, {"op": "retry", "id": message_id})
    if not answer.get("ok"):
        report_error(str(answer.get("error")), answer.get("hint"), as_json=as_json)
        raise SystemExit(EXIT_FAILED)
    if as_json:
        print_json({"id": message_id, "state": "queued"})
    else:
        click.echo(f"message {message_id} queued again")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@pass_cli
def reload(obj: CliContext, as_json: bool) -> None:
    """Make the daemon read orchestrator.yaml again (also on SIGHUP): providers, tokens
    and channels take effect without a restart. A file that does not load is refused
    and the daemon keeps running with its configuration."""
    from orchestrator.service.client import control_request

    answer = control_request(obj.home, {"op": "reload"}, timeout=30)
    if as_json:
        print_json(answer)
    elif answer.get("ok"):
        restarted = ", ".join(answer.get("channels_restarted") or []) or "none"
        click.echo(f"reloaded {obj.home.config_file} (channels started again: {restarted})")
        for note in answer.get("notes") or []:
            click.echo(f"note: {note}")
    else:
        print_error(answer.get("error"), answer.get("hint"))
    if not answer.get("ok"):
        raise SystemExit(EXIT_FAILED)
