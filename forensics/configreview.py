"""Configuration review: the launch flags of a server (from `server_config` events) with review notes from
the knowledge packs (`rules/knowledge/*.yaml`), and the memory arithmetic where GPU memory is known.

A knowledge pack is data, validated strictly like the rule packs (unknown keys, bad values and unknown
placeholders are errors naming `file:line`, all of a file's errors in one pass):

    knowledge: sglang-flags
    sm_families: {sm_120: {architecture: Blackwell (workstation), gpus: RTX PRO 6000 Blackwell, ..., min_cuda: '12.8'}}
    gpus: [{match: RTX PRO 6000 Blackwell, name: NVIDIA RTX PRO 6000 Blackwell, sm: sm_120, memory_gb: 96}]
    xids: {79: GPU has fallen off the bus}
    oom_constraints: {global: ..., memcg: ...}
    flags:
      - flag: --mem-fraction-static
        notes:
          - when: {above: 0.85}
            note: '{value} is aggressive: ...'
          - when: {above: 0.85, with: [--speculative-algorithm]}
            note: 'more so with a speculative draft model ...'

`when` keys: `present` (default true), `equals` (a value or a list), `above`, `below` (numbers), `with` (any of
these flags also given), `without` (none of these given). Note templates may use `{flag}`, `{value}` and any
flag's value by its snake name (`{speculative_algorithm}`); an unknown one stays visible.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import kubepods
from .casts import parse_command_flags, parse_server_args as scan_server_args
from .correlate import evidence_of
from .correlation_packs import _Reader as _NodeReader
from .eventview import EventView
from .gpuholders import others_fields
from .model import Flag, ServerConfig
from .statements import fill, fill_prose, template_names
from .yamlread import Location, PackError

# libyaml's safe loader when PyYAML has it (same nodes and marks, several times faster)
ROOT = Path(__file__).resolve().parent.parent
KNOWLEDGE_DIR = ROOT / "rules" / "knowledge"

TOP_KEYS = ("knowledge", "description", "sm_families", "gpus", "xids", "oom_constraints", "flags")
FAMILY_KEYS = ("architecture", "gpus", "min_cuda")
GPU_KEYS = ("match", "name", "sm", "memory_gb")
FLAG_KEYS = ("flag", "aliases", "description", "notes")
NOTE_KEYS = ("when", "note")
WHEN_KEYS = ("present", "equals", "above", "below", "with", "without")
OOM_CONSTRAINTS = ("global", "memcg", "cpuset", "mempolicy")


class KnowledgeError(PackError):
    """Problems in knowledge files: `errors` is a list of (path, line, message), all of them at once."""


@dataclass(frozen=True)
class SmFamily:
    sm: str                       # `sm_120`
    architecture: str             # `Blackwell (consumer/workstation)`
    gpus: str                     # `RTX 5090/5080/..., RTX PRO 6000/5000/... Blackwell`
    min_cuda: str = ""            # the first CUDA toolkit that compiles for it


@dataclass(frozen=True)
class Gpu:
    match: str                    # a literal the logs print (case-insensitive)
    name: str
    sm: str = ""
    memory_gb: float | None = None


@dataclass(frozen=True)
class When:
    present: bool = True
    equals: tuple[str, ...] = ()
    above: float | None = None
    below: float | None = None
    with_: tuple[str, ...] = ()
    without: tuple[str, ...] = ()


@dataclass(frozen=True)
class FlagNote:
    when: When
    note: str
    location: Location


@dataclass(frozen=True)
class FlagKnowledge:
    flag: str                     # `--mem-fraction-static`
    aliases: tuple[str, ...]
    description: str
    notes: tuple[FlagNote, ...]


# a GPU name nvidia-smi's table cut to its column (`|   0  NVIDIA RTX PRO 6000 Blac...    On  |`): what is left of
# it after `NVIDIA `, long enough to tell one product
_CUT_NAME = re.compile(r"NVIDIA ((?:[A-Za-z0-9\-]+ )+[A-Za-z0-9\-]+|[A-Za-z0-9\-]{6,})\.\.\.")


@dataclass(frozen=True)
class Knowledge:
    sm_families: tuple[SmFamily, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    xids: tuple[tuple[str, str], ...] = ()
    oom_constraints: tuple[tuple[str, str], ...] = ()
    flags: tuple[FlagKnowledge, ...] = ()

    def family(self, sm: str | None) -> SmFamily | None:
        for f in self.sm_families:
            if f.sm == sm:
                return f
        return None

    def xid(self, code: Any) -> str | None:
        return dict(self.xids).get(str(code))

    def constraint(self, name: str | None) -> str | None:
        return dict(self.oom_constraints).get(name or "")

    def flag(self, name: str) -> FlagKnowledge | None:
        for f in self.flags:
            if f.flag == name or name in f.aliases:
                return f
        return None

    def gpu(self, text: str) -> Gpu | None:
        """The GPU a line names (the longest `match` found in it); else the one a name nvidia-smi cut to its
        column's width begins (`NVIDIA RTX PRO 6000 Blac...`), when only one known GPU's name begins so."""
        low = text.lower()
        best = None
        for g in self.gpus:
            if g.match.lower() in low and (best is None or len(g.match) > len(best.match)):
                best = g
        if best is not None or "..." not in text:
            return best
        m = _CUT_NAME.search(text)
        if m is None:
            return None
        head = " ".join(m.group(1).split()).lower()
        begins = {g.name: g for g in self.gpus if g.match.lower().startswith(head)}
        return next(iter(begins.values())) if len(begins) == 1 else None


# ----------------------------------------------------------------------------------------------------------
# loading


class _Reader(_NodeReader):
    """Knowledge packs are read like correlation files (same node reader, no event kinds)."""

    def __init__(self, path: str, text: str):
        super().__init__(path, text, ())

    def mapping(self, node: yaml.Node, what: str, allowed: Sequence[str] | None = None) -> dict[str, yaml.Node] | None:
        if not isinstance(node, yaml.MappingNode):
            self.add(node, f"{what} must be a mapping")
            return None
        out: dict[str, yaml.Node] = {}
        for k, v in node.value:
            key = str(self.value(k)) if isinstance(k, yaml.ScalarNode) else None
            if key is None:
                self.add(k, f"{what}: keys must be plain values")
                continue
            if key in out:
                self.add(k, f"duplicate key '{key}' in {what}")
                continue
            if allowed is not None and key not in allowed:
                hint = difflib.get_close_matches(key, allowed, n=1)
                self.add(k, f"unknown key '{key}' in {what}" +
                         (f" (did you mean '{hint[0]}'?)" if hint else f" (allowed: {', '.join(allowed)})"))
                continue
            out[key] = v
        return out

    def string(self, node: yaml.Node, what: str) -> str | None:
        v = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if v is None or isinstance(v, (dict, list)) or not str(v).strip():
            self.add(node, f"{what} must be a non-empty string")
            return None
        return ("true" if v else "false") if isinstance(v, bool) else " ".join(str(v).split())

    def strings(self, node: yaml.Node, what: str) -> tuple[str, ...]:
        if isinstance(node, yaml.ScalarNode):
            s = self.string(node, what)
            return (s,) if s else ()
        if not isinstance(node, yaml.SequenceNode):
            self.add(node, f"{what} must be a string or a list")
            return ()
        return tuple(s for n in node.value if (s := self.string(n, f"an item of {what}")))

    def number(self, node: yaml.Node, what: str) -> float | None:
        v = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.add(node, f"{what} must be a number")
            return None
        return float(v)

    def flag_name(self, node: yaml.Node, what: str) -> str | None:
        s = self.string(node, what)
        if s is not None and not re.fullmatch(r"--[a-z0-9][a-z0-9-]*", s):
            self.add(node, f"{what} '{s}' must look like --some-flag")
            return None
        return s

    def read(self) -> Knowledge:
        try:
            root = self.compose()
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            self.add((mark.line + 1) if mark else 1, f"not valid YAML: {getattr(e, 'problem', e)}")
            return Knowledge()
        if root is None:
            self.add(1, "empty knowledge pack")
            return Knowledge()
        top = self.mapping(root, "a knowledge pack", TOP_KEYS)
        if top is None:
            return Knowledge()
        fams: list[SmFamily] = []
        for sm, fnode in (self.mapping(top["sm_families"], "sm_families") or {}).items() if "sm_families" in top else ():
            if not re.fullmatch(r"sm_\d{2,3}", sm):
                self.add(fnode, f"sm_families: '{sm}' must look like sm_120")
            m = self.mapping(fnode, f"sm_families.{sm}", FAMILY_KEYS)
            if m is None:
                continue
            if "architecture" not in m or "gpus" not in m:
                self.add(fnode, f"sm_families.{sm} needs `architecture` and `gpus`")
                continue
            arch = self.string(m["architecture"], f"sm_families.{sm}.architecture")
            gpus = self.string(m["gpus"], f"sm_families.{sm}.gpus")
            mc = self.string(m["min_cuda"], f"sm_families.{sm}.min_cuda") if "min_cuda" in m else ""
            if arch and gpus:
                fams.append(SmFamily(sm, arch, gpus, mc or ""))
        gpus_out: list[Gpu] = []
        if "gpus" in top:
            if not isinstance(top["gpus"], yaml.SequenceNode):
                self.add(top["gpus"], "gpus must be a list")
            else:
                for gnode in top["gpus"].value:
                    m = self.mapping(gnode, "a gpu", GPU_KEYS)
                    if m is None:
                        continue
                    if "match" not in m or "name" not in m:
                        self.add(gnode, "a gpu needs `match` and `name`")
                        continue
                    match = self.string(m["match"], "gpu match")
                    name = self.string(m["name"], "gpu name")
                    sm = self.string(m["sm"], "gpu sm") if "sm" in m else ""
                    mem = self.number(m["memory_gb"], "gpu memory_gb") if "memory_gb" in m else None
                    if match and name:
                        gpus_out.append(Gpu(match, name, sm or "", mem))
        xids = []
        for code, xnode in (self.mapping(top["xids"], "xids") or {}).items() if "xids" in top else ():
            if not str(code).isdigit():
                self.add(xnode, f"xids: '{code}' must be a number")
            s = self.string(xnode, f"xids.{code}")
            if s:
                xids.append((str(code), s))
        cons = []
        if "oom_constraints" in top:
            for name, cnode in (self.mapping(top["oom_constraints"], "oom_constraints", OOM_CONSTRAINTS) or {}).items():
                s = self.string(cnode, f"oom_constraints.{name}")
                if s:
                    cons.append((name, s))
        flags: list[FlagKnowledge] = []
        if "flags" in top:
            if not isinstance(top["flags"], yaml.SequenceNode):
                self.add(top["flags"], "flags must be a list")
            else:
                for fnode in top["flags"].value:
                    fk = self.flag_entry(fnode)
                    if fk is not None:
                        flags.append(fk)
        return Knowledge(tuple(fams), tuple(gpus_out), tuple(xids), tuple(cons), tuple(flags))

    def flag_entry(self, node: yaml.Node) -> FlagKnowledge | None:
        m = self.mapping(node, "a flag", FLAG_KEYS)
        if m is None:
            return None
        if "flag" not in m:
            self.add(node, "a flag needs `flag`")
            return None
        name = self.flag_name(m["flag"], "flag")
        aliases = tuple(a for a in (self.strings(m["aliases"], "aliases") if "aliases" in m else ()))
        desc = self.string(m["description"], "description") if "description" in m else ""
        notes: list[FlagNote] = []
        if "notes" in m:
            if not isinstance(m["notes"], yaml.SequenceNode):
                self.add(m["notes"], f"notes of {name} must be a list")
            else:
                for nn in m["notes"].value:
                    nm = self.mapping(nn, f"a note of {name}", NOTE_KEYS)
                    if nm is None:
                        continue
                    if "note" not in nm:
                        self.add(nn, f"a note of {name} needs `note`")
                        continue
                    text = self.string(nm["note"], f"note of {name}")
                    if text:
                        try:
                            for ph in template_names(text):
                                if "." in ph:
                                    self.add(nm["note"], f"note of {name}: placeholder {{{ph}}} must be a plain name")
                        except ValueError as e:
                            self.add(nm["note"], f"note of {name}: {e}")
                    when = self.when(nm["when"], name) if "when" in nm else When()
                    if text and when is not None:
                        notes.append(FlagNote(when, text, Location(self.path, nn.start_mark.line + 1)))
        if name is None:
            return None
        return FlagKnowledge(name, aliases, desc or "", tuple(notes))

    def when(self, node: yaml.Node, owner: str | None) -> When | None:
        m = self.mapping(node, f"when of {owner}", WHEN_KEYS)
        if m is None:
            return None
        present = True
        if "present" in m:
            v = self.value(m["present"])
            if not isinstance(v, bool):
                self.add(m["present"], "present must be true or false")
            else:
                present = v
        equals = self.strings(m["equals"], "equals") if "equals" in m else ()
        above = self.number(m["above"], "above") if "above" in m else None
        below = self.number(m["below"], "below") if "below" in m else None
        with_ = tuple(f for n in ([m["with"]] if "with" in m else []) for f in self.strings(n, "with"))
        without = tuple(f for n in ([m["without"]] if "without" in m else []) for f in self.strings(n, "without"))
        for f in (*with_, *without):
            if not f.startswith("--"):
                self.add(node, f"when of {owner}: '{f}' must be a --flag")
        return When(present, tuple(e.lower() for e in equals), above, below, with_, without)


def load_knowledge(extra_dirs: Sequence[Path | str] = (), *, builtin: bool = True) -> Knowledge:
    """The built-in knowledge packs, then `extra_dirs` (entries of a later pack replace earlier ones of the same
    key). Raises KnowledgeError listing every problem."""
    dirs = ([KNOWLEDGE_DIR] if builtin else []) + [Path(d) for d in extra_dirs]
    errors: list[tuple[str, int, str]] = []
    fams: dict[str, SmFamily] = {}
    gpus: dict[str, Gpu] = {}
    xids: dict[str, str] = {}
    cons: dict[str, str] = {}
    flags: dict[str, FlagKnowledge] = {}
    for d in dirs:
        if not d.is_dir():
            if d != KNOWLEDGE_DIR:
                errors.append((str(d), 0, "knowledge directory does not exist"))
            continue
        for f in sorted(d.glob("*.yaml")):
            try:
                r = _Reader(str(f), f.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError) as e:
                errors.append((str(f), 1, f"cannot read: {e}"))
                continue
            k = r.read()
            errors.extend(r.errors)
            fams.update({x.sm: x for x in k.sm_families})
            gpus.update({x.match: x for x in k.gpus})
            xids.update(dict(k.xids))
            cons.update(dict(k.oom_constraints))
            flags.update({x.flag: x for x in k.flags})
    if errors:
        raise KnowledgeError(errors)
    return Knowledge(tuple(fams.values()), tuple(gpus.values()), tuple(xids.items()), tuple(cons.items()),
                     tuple(flags.values()))


# ----------------------------------------------------------------------------------------------------------
# derived fields


def normalize_sm(value: Any) -> str | None:
    """`compute_120a`, `sm_120a`, `120a`, `12.0`, `SM120`, `sm120` -> `sm_120`."""
    if value is None:
        return None
    s = str(value).strip().lower()
    m = re.search(r"(?:sm|compute)_?(\d{2,3})[af]?\b", s) or re.fullmatch(r"(\d{2,3})[af]?", s)
    if m:
        return f"sm_{m.group(1)}"
    m = re.fullmatch(r"(\d{1,2})\.(\d)[af]?", s)
    if m:
        return f"sm_{m.group(1)}{m.group(2)}"
    return None


_CONSTRAINTS = {"constraint_none": "global", "none": "global", "global": "global", "global_oom": "global",
                "constraint_memcg": "memcg", "memcg": "memcg", "memory cgroup": "memcg",
                "constraint_cpuset": "cpuset", "cpuset": "cpuset",
                "constraint_memory_policy": "mempolicy", "mempolicy": "mempolicy"}


def flag_key(name: str) -> str:
    """`--mem-fraction-static` / `mem_fraction_static` -> `--mem-fraction-static`."""
    n = str(name).strip()
    if not n.startswith("-"):
        n = "--" + n.replace("_", "-")
    return n


def snake(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _gib(kb: float) -> str:
    return f"{kb / 1048576:.1f}"


def enricher(kn: Knowledge) -> Callable[[str, dict[str, Any], str], dict[str, Any]]:
    """A function adding derived fields to an event's fields: `<x>_gib` for `<x>_kb`/`<x>_bytes`, `sm`,
    `sm_family`, `sm_gpus`, `min_cuda` for an architecture, `constraint`/`constraint_text` for an OOM kill,
    `xid_meaning`, `signal_name`, and a server_config's flags by snake name (`mem_fraction_static`)."""

    def enrich(kind: str, fields: dict[str, Any], message: str = "") -> dict[str, Any]:
        out = dict(fields)
        for k, v in fields.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if k.endswith("_kb"):
                out.setdefault(k[:-3] + "_gib", _gib(v))
            elif k.endswith("_bytes"):
                out.setdefault(k[:-6] + "_gib", f"{v / 2**30:.2f}")
        sm = None
        for k in ("sm", "gpu_arch", "arch", "compute_capability", "capability"):
            if fields.get(k) is not None:
                sm = normalize_sm(fields[k])
                if sm:
                    break
        if sm:
            out["sm"] = sm
            fam = kn.family(sm)
            if fam:
                out.setdefault("sm_family", fam.architecture)
                out.setdefault("sm_gpus", fam.gpus)
                out.setdefault("gpus_desc", fam.gpus)
                if fam.min_cuda:
                    out.setdefault("min_cuda", fam.min_cuda)
        if kind in ("oom_kill", "oom_invoked") or "constraint" in fields:
            c = fields.get("constraint")
            norm = _CONSTRAINTS.get(str(c).lower()) if c is not None else None
            if norm is None and fields.get("oom_memcg"):
                norm = "memcg"
            if norm is None and str(fields.get("prefix", "")).lower().startswith("memory cgroup"):
                norm = "memcg"
            if norm is not None:
                out["constraint"] = norm
                text = kn.constraint(norm)
                if text:
                    out["constraint_text"] = fill_prose(text, out)
            elif kind == "oom_kill":
                out.setdefault("constraint_text", "not shown in the ingested lines (the kernel's `oom-kill:constraint=` "
                                                  "summary line would say whether it was global or a cgroup limit)")
        if kind in ("oom_kill", "oom_invoked"):
            out.update(_kube_fields(fields, out.get("constraint") == "memcg"))
        if kind == "cuda_oom":
            out.setdefault("load_text", "")       # filled from the last batch line before it, when there is one
            for k, v in others_fields(fields).items():    # the GPU's other processes, from PyTorch's list
                out.setdefault(k, v)
        if fields.get("xid") is not None:
            meaning = kn.xid(fields["xid"])
            if meaning:
                out.setdefault("xid_meaning", meaning)
        if fields.get("signal"):
            s = str(fields["signal"]).upper()
            out.setdefault("signal_name", s if s.startswith("SIG") else "SIG" + s)
        if kind == "server_config":
            for name, v in flags_of(fields, message).items():
                out.setdefault(snake(name), v)
            for fk in kn.flags:
                out.setdefault(snake(fk.flag), "(default)")
        return out

    enrich.message_kinds = MESSAGE_KINDS  # type: ignore[attr-defined]
    return enrich


# the kinds whose message `enricher`'s function reads (a launch configuration's flags): for the others, events with
# the same kind and fields get the same fields whatever their message (`eventview.views` enriches them once)
MESSAGE_KINDS = frozenset({"server_config"})


def _kube_fields(fields: Mapping[str, Any], memcg: bool) -> dict[str, str]:
    """A memcg OOM kill's `limit_text` (`the pod's memory limit, 64.0 GiB`, with what the report shows) and, in a
    Kubernetes pod, `pod_uid`, `qos_class` (from the victim's cgroup) and `limit_level` (`container`: its own
    `resources.limits.memory`; `pod`: the pod's cgroup, whose limit is the sum of its containers')."""
    out: dict[str, str] = {}
    victim = kubepods.parse(fields.get("task_memcg")) or kubepods.parse(fields.get("cgroup"))
    if victim is not None:
        out.update(pod_uid=victim.pod_uid, qos_class=victim.qos_class)
    limit = kubepods.parse(fields.get("oom_memcg") or fields.get("legacy_oom_memcg") or fields.get("memcg_stats"))
    if limit is not None:
        out["limit_level"] = limit.level
    text = f"the {limit.level}'s memory limit" if limit is not None else "its memory limit"
    kb = fields.get("memcg_limit_kb")
    if isinstance(kb, int) and not isinstance(kb, bool) and 0 < kb < 2**50:
        text += f", {_gib(kb)} GiB"
    if memcg:
        out["limit_text"] = text
    return out


# ----------------------------------------------------------------------------------------------------------
# flags


def _flag_texts(flags: Mapping[str, Any]) -> dict[str, str]:
    """Flags as the review reads them, `--flag` -> the text of its value: None and False are flags not given, True
    is `true`."""
    return {flag_key(k): "true" if v is True else str(v) for k, v in flags.items() if v is not None and v is not False}


def parse_command(command: str) -> dict[str, str]:
    """`--flag value` / `--flag=value` / bare `--switch` (-> `true`) from a command line, read as the rules' `flags`
    cast reads it (`casts.parse_command_flags`)."""
    return _flag_texts(parse_command_flags(command))


def parse_server_args(message: str) -> dict[str, str]:
    """SGLang's `server_args=ServerArgs(a=1, b='x', ...)` (or its 0.5.23 dict form) -> {--a: '1', --b: 'x'},
    leaving out unset values (None, False), read as the rules' `flags` cast reads it (`casts.parse_server_args`)."""
    return _flag_texts(scan_server_args(message))


def flags_of(fields: Mapping[str, Any], message: str) -> dict[str, str]:
    """A server_config event's flags (`--flag` -> value text), from `fields.flags`, else parsed."""
    raw = fields.get("flags")
    if isinstance(raw, dict) and raw:
        return _flag_texts(raw)
    if fields.get("command"):
        return parse_command(str(fields["command"]))
    if "server_args=" in message:
        return parse_server_args(message)
    if "--" in message:
        return parse_command(message.split("=", 1)[1] if message.startswith("ExecStart=") else message)
    return {}


def _num(v: str | None) -> float | None:
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


def _applies(w: When, value: str | None, flags: Mapping[str, str]) -> bool:
    if (value is not None) != w.present:
        return False
    if value is None:
        return all(f not in flags for f in w.without) and (not w.with_ or any(f in flags for f in w.with_))
    if w.equals and value.lower() not in w.equals:
        return False
    n = _num(value)
    if w.above is not None and (n is None or not n > w.above):
        return False
    if w.below is not None and (n is None or not n < w.below):
        return False
    if w.with_ and not any(f in flags for f in w.with_):
        return False
    if w.without and any(f in flags for f in w.without):
        return False
    return True


def review_flags(flags: Mapping[str, str], kn: Knowledge, extra: Mapping[str, str] | None = None) -> tuple[Flag, ...]:
    """One Flag per given flag, in the order given, with the knowledge pack's notes that apply."""
    values: dict[str, Any] = {snake(k): v for k, v in flags.items()}
    out = []
    for name, value in flags.items():
        fk = kn.flag(name)
        notes = []
        if fk is not None:
            for n in fk.notes:
                if _applies(n.when, value, flags):
                    notes.append(fill(n.note, {**values, "flag": name, "value": value}))
        if extra and extra.get(name):
            notes.append(extra[name])
        out.append(Flag(name=name, value=value, note=" ".join(notes)))
    # flags the knowledge pack has something to say about when they are absent
    for fk in kn.flags:
        if fk.flag in flags or any(a in flags for a in fk.aliases):
            continue
        notes = [fill(n.note, {**values, "flag": fk.flag, "value": "(not set)"}) for n in fk.notes
                 if not n.when.present and _applies(n.when, None, flags)]
        if notes:
            out.append(Flag(name=fk.flag, value="(not set)", note=" ".join(notes)))
    return tuple(out)


def _fmt_gb(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".") if abs(x - round(x)) < 0.05 else f"{x:.1f}"


def arithmetic(flags: Mapping[str, str], gpu_memory_gb: float | None, gpus: int | None,
               memory_from: str = "") -> tuple[str, ...]:
    """`0.90 x 96 GB = 86.4 GB reserved per GPU (691.2 GB over 8 GPUs), 9.6 GB per GPU left ...`."""
    frac = _num(flags.get("--mem-fraction-static"))
    if frac is None or not gpu_memory_gb:
        return ()
    reserved = frac * gpu_memory_gb
    left = gpu_memory_gb - reserved
    tp = _num(flags.get("--tp-size") or flags.get("--tensor-parallel-size"))
    n = int(tp) if tp else gpus
    over = f" ({_fmt_gb(reserved * n)} GB over {n} GPUs)" if n and n > 1 else ""
    draft = " and the draft model" if any(k in flags for k in ("--speculative-algorithm",
                                                               "--speculative-draft-model-path")) else ""
    src = f" [{memory_from}]" if memory_from else ""
    return (f"{flags['--mem-fraction-static']} x {_fmt_gb(gpu_memory_gb)} GB = {_fmt_gb(reserved)} GB reserved per "
            f"GPU{over}, {_fmt_gb(left)} GB per GPU left for activations{draft}{src}",)


@dataclass(frozen=True)
class Hardware:
    """What the logs show of the GPUs, for the arithmetic and the `--tp-size` check."""

    memory_gb: float | None = None
    memory_from: str = ""              # how the memory is known ("RTX PRO 6000 Blackwell: 96 GB")
    gpus_seen: int | None = None
    gpus_from: str = ""                # "8 TP ranks in the SGLang log", "3 PCI addresses in NVRM lines"


def tp_note(flags: Mapping[str, str], hw: Hardware) -> str:
    tp = _num(flags.get("--tp-size") or flags.get("--tensor-parallel-size"))
    if tp is None or not hw.gpus_seen:
        return ""
    if int(tp) == hw.gpus_seen:
        return f"Matches the {hw.gpus_seen} GPU{'s' if hw.gpus_seen != 1 else ''} seen ({hw.gpus_from})."
    return (f"The logs show {hw.gpus_seen} GPU(s) ({hw.gpus_from}) but --tp-size is {int(tp)}: "
            "check that every rank started and that the GPUs count is what the server expects.")


_DUMP = re.compile(r"\s*(?:server_args=)?(?:ServerArgs\(|Namespace\(|\{)")


def is_dump(command: str) -> bool:
    """Whether a launch configuration is a server's dump of every argument (SGLang's `ServerArgs(...)`, vLLM's
    `Namespace(...)`, their dicts) rather than a command line: a dump lists the defaults too."""
    return _DUMP.match(command) is not None


def review_configs(config_events: Sequence[EventView], kn: Knowledge, hw: Hardware = Hardware()
                   ) -> tuple[ServerConfig, ...]:
    """One ServerConfig per unit (or per host for configs without a unit): the most complete launch command
    logged (a command line wins over a `server_args` dump; the latest wins among equals)."""
    best: dict[tuple[str | None, str | None], tuple[tuple, EventView, dict[str, str]]] = {}
    for e in config_events:
        if e.kind != "server_config":
            continue
        flags = flags_of(e.fields, e.message)
        if not flags:
            continue
        is_cmd = "server_args=" not in e.message
        key = (e.unit, e.host if e.unit is None else None)
        score = (is_cmd, e.format == "unit-file", len(flags) if is_cmd else 0, e.t or 0.0, -e.seq)
        if key not in best or score > best[key][0]:
            best[key] = (score, e, flags)
    out = []
    for (unit, _h), (_s, e, flags) in sorted(best.items(), key=lambda kv: (kv[0][0] or "", kv[0][1] or "")):
        extra = {}
        tn = tp_note(flags, hw)
        if tn:
            extra["--tp-size" if "--tp-size" in flags else "--tensor-parallel-size"] = tn
        command = str(e.fields.get("command") or e.message.split("\n", 1)[0])
        if command.startswith("ExecStart="):
            command = command[len("ExecStart="):]
        out.append(ServerConfig(unit=unit, host=e.host, command=command, flags=review_flags(flags, kn, extra),
                                evidence=evidence_of(e, "the launch configuration"),
                                arithmetic=arithmetic(flags, hw.memory_gb, hw.gpus_seen, hw.memory_from)))
    return tuple(out)
