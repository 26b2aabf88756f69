"""Recommended actions list each command once: two rules asking for the same journal lines, one with
`-o short-iso-precise` and one without, are one action."""

from __future__ import annotations

from forensics.render.view import command_key


def test_journalctl_output_options_do_not_make_another_command() -> None:
    a = 'journalctl -u x.service --since "2025-05-26 13:56" --until "2025-05-26 13:59" -o short-iso-precise'
    b = 'journalctl -u x.service --since "2025-05-26 13:56" --until "2025-05-26 13:59"'
    c = 'journalctl --no-pager --output=json -u x.service --since "2025-05-26 13:56" --until "2025-05-26 13:59"'
    assert command_key(a) == command_key(b) == command_key(c)
    # another window, another unit, the kernel's lines, another boot, a pipe: other commands
    others = [b.replace("13:59", "14:00"), b.replace("x.service", "y.service"), b.replace("-u x.service", "-k"),
              "journalctl -b -u x.service --since \"2025-05-26 13:56\"", b + " | grep -i oom"]
    assert len({command_key(x) for x in [b, *others]}) == 1 + len(others)
    # not journalctl, or not parseable: as written
    assert command_key("grep -c x f.log") == "grep -c x f.log"
    assert command_key('journalctl -u "x') == 'journalctl -u "x'
