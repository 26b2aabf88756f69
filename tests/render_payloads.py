"""Hostile and private inputs for the report tests: log text that tries to be Markdown or HTML,
and values that redaction must remove."""

from __future__ import annotations

from dataclasses import replace

from fixtures.incident_fixture import seed_incident

from forensics.model import Evidence, Flag, Gap, Incident

PAYLOAD = ("<script>alert(1)</script> <img src=x onerror=alert(2)> [click](http://evil.example/x) "
           "![pic](https://evil.example/i.png) **bold** <b>b</b> &lt;i&gt; www.evil.example @everyone #123 "
           "$x^2$ javascript:alert(3) | a | b | `tick` ```` fence ```` ~~~ \x1b[31mred\u202eevil")
PAYLOAD_LINES = PAYLOAD + "\n```\n# heading\n- item\n<iframe src=//evil.example></iframe>\n[ref]: http://evil.example"


def hostile_incident() -> Incident:
    """The seed incident with the payload in every place log text can reach."""
    inc = seed_incident()
    events = []
    for i, e in enumerate(inc.events):
        if i == 2:      # the root cause event
            e = replace(e, message=PAYLOAD_LINES, title=f"killed {PAYLOAD}",
                        explain=f"The line says {PAYLOAD}", fields={**e.fields, "process": PAYLOAD})
        events.append(e)
    root = inc.root_cause
    assert root is not None
    ev = Evidence(path=root.evidence_for[0].path, line=root.evidence_for[0].line,
                  line_end=root.evidence_for[0].line_end, ts=root.evidence_for[0].ts,
                  ts_source=root.evidence_for[0].ts_source, text=PAYLOAD_LINES, note=f"note {PAYLOAD}",
                  source_id=root.evidence_for[0].source_id)
    root = replace(root, statement=f"{root.statement} {PAYLOAD}", evidence_for=(ev, *root.evidence_for[1:]),
                   alternatives=(*root.alternatives, PAYLOAD), next_steps=(*root.next_steps, PAYLOAD))
    cfg = inc.configs[0]
    cfg = replace(cfg, command=f"{cfg.command} --extra {PAYLOAD}",
                  flags=(*cfg.flags, Flag("--extra", PAYLOAD, f"note {PAYLOAD}")))
    return replace(inc, events=tuple(events), root_cause=root, conclusions=(root, *inc.conclusions[1:]),
                   configs=(cfg, *inc.configs[1:]), environment={**inc.environment, "payload": PAYLOAD},
                   gaps=(*inc.gaps, Gap(what=PAYLOAD, why=PAYLOAD, commands=(PAYLOAD,))),
                   headline=f"{inc.headline} {PAYLOAD}")


SECRETS = {
    "host": ["dflash-train", "gpu-node-7.corp.example.com"],
    "ip": ["10.1.2.200", "10.1.2.15", "2001:db8::7"],
    "email": ["alice.ops@example.com"],
    "user": ["mallory"],
    "mac": ["3c:ec:ef:12:34:56"],
    "token": ["sk-test1234567890abcdefXYZ", "tok_9f8e7d6c5b4a", "hf_AbCdEfGhIjKlMnOpQrStUv",
              "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz", "s3cr3t-passw0rd"],
}


def private_incident() -> Incident:
    """The seed incident with host names, addresses, e-mails, user names and tokens planted everywhere."""
    inc = seed_incident()
    planted = (
        "ssh root@10.1.2.200 from gpu-node-7.corp.example.com (3c:ec:ef:12:34:56); "
        "session opened for user mallory; model at /home/mallory/models; mail alice.ops@example.com; "
        "GET https://hub.example.com/x?token=tok_9f8e7d6c5b4a; Authorization: Bearer "
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz; HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUv; "
        "peer [2001:db8::7]:443; password=s3cr3t-passw0rd"
    )
    events = []
    for i, e in enumerate(inc.events):
        if i == 2:
            e = replace(e, message=f"{e.message} {planted}", explain=f"{e.explain} Seen from 10.1.2.200.")
        events.append(e)
    cfg = inc.configs[0]
    cmd = cfg.command.replace("--host 0.0.0.0", "--host 10.1.2.200") + " --api-key sk-test1234567890abcdefXYZ"
    flags = tuple(Flag(f.name, "10.1.2.200", f.note) if f.name == "--host" else f for f in cfg.flags)
    cfg = replace(cfg, command=cmd, flags=(*flags, Flag("--api-key", "sk-test1234567890abcdefXYZ", "")))
    gaps = (*inc.gaps, Gap(what="Who restarted it", why="Ask alice.ops@example.com, who was on gpu-node-7.corp.example.com.",
                           commands=("ssh mallory@gpu-node-7.corp.example.com last -n 20",)))
    return replace(inc, events=tuple(events), configs=(cfg, *inc.configs[1:]), gaps=gaps,
                   environment={**inc.environment, "mgmt_mac": "3c:ec:ef:12:34:56"})
