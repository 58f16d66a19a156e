"""Episodes the write gate and the forgetting stages must handle, and everyday filler.

- Secrets are planted into ordinary episodes, in every free-text field an agent fills (text,
  observations, actions, feedback and a condition value), because redaction has to look
  everywhere, not only at ``text``. Each planted string is recorded with its episode id.
- Sensitive records (HR and medical matters) carry ``sensitivity="high"`` and a purpose, and
  some of them a TTL; a few temporary grants expire within days.
- Filler (system events, users' questions, agent notes) has no actions and no claims: it
  gives recall and clustering realistic volume without creating candidates.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from datetime import timedelta

from memory_core.demo import coding, it_support
from memory_core.demo._builder import Builder, Episode, Truth
from memory_core.demo.scenario import TenantPlan

__all__ = ["generate_chatter", "generate_sensitive", "generate_temporary", "plant_secrets"]

_CHATTER = {it_support.NAMESPACE: it_support.CHATTER, coding.NAMESPACE: coding.CHATTER}
_UPPER_DIGITS = string.ascii_uppercase + string.digits
_B64 = string.ascii_letters + string.digits + "+/"

PG_URL = "postgres://admin:S3cretPass!@db.internal:5432/app"
TEST_CARD = "4111 1111 1111 1111"


def luhn_card(b: Builder, prefix: str = "5500") -> str:
    """A 16-digit Luhn-valid card number, grouped by four."""
    digits = [int(c) for c in prefix] + [b.rng.randint(0, 9) for _ in range(15 - len(prefix))]
    total = 0
    for i, d in enumerate(reversed(digits)):  # the check digit will sit to the right
        total += sum(divmod(d * 2, 10)) if i % 2 == 0 else d
    digits.append((10 - total % 10) % 10)
    raw = "".join(map(str, digits))
    return " ".join(raw[i : i + 4] for i in range(0, 16, 4))


def _is_agent(ep: Episode) -> bool:
    return ep["source_role"] == "agent"


def _agent_success(ep: Episode) -> bool:
    return ep["source_role"] == "agent" and ep["outcome"] == "success"


def _agent_open(ep: Episode) -> bool:
    return _is_agent(ep) and ep["outcome"] in ("unknown", "partial") and bool(ep["conditions"])


class _Planter:
    """Picks host episodes (each at most once) and records what went where."""

    def __init__(self, b: Builder, truth: Truth) -> None:
        self.b, self.truth, self.used = b, truth, set[str]()

    def host(self, tenant_id: str, namespace: str, accept: Callable[[Episode], bool]) -> Episode:
        hosts = [
            ep
            for ep in self.b.episodes
            if ep["tenant_id"] == tenant_id
            and ep["namespace"] == namespace
            and ep["episode_id"] not in self.used
            and accept(ep)
        ]
        return self.b.rng.choice(hosts)

    def subject(self, tenant_id: str) -> str:
        return self.b.rng.choice(
            sorted(
                {
                    ep["subject_id"]
                    for ep in self.b.episodes
                    if ep["tenant_id"] == tenant_id and ep["source_role"] == "user"
                }
            )
        )

    def record(self, kind: str, value: str, needle: str, episode: Episode, where: str) -> None:
        self.used.add(episode["episode_id"])
        self.truth.secrets.append(
            {
                "kind": kind,
                "value": value,
                "needle": needle,
                "episode_id": episode["episode_id"],
                "field": where,
            }
        )


def plant_secrets(b: Builder, truth: Truth) -> None:
    """Plant one of each secret kind (some twice) and record where each went.

    ``value`` is the string as planted; ``needle`` the part that must never be stored even
    if the rest survives redaction (the token of a bearer header, the password of a URL).
    """
    p = _Planter(b, truth)
    it_ns, code_ns = it_support.NAMESPACE, coding.NAMESPACE

    anthropic = "sk-ant-api03-" + b.token(40)
    snippet = f"ANTHROPIC_API_KEY={anthropic}"
    host = p.host("globex-dev", code_ns, _agent_success)
    host["text"] += f" Debug log printed {snippet} while reproducing."
    p.record("anthropic_api_key", anthropic, anthropic, host, "text")
    host = p.host("initech", code_ns, _is_agent)
    host["observations"].append(f"Environment dump: {snippet}")
    p.record("anthropic_api_key", anthropic, anthropic, host, "observations")

    aws = "AKIA" + b.token(16, _UPPER_DIGITS)
    host = p.host("acme-it", it_ns, _agent_success)
    host["observations"].append(f"Found AWS_ACCESS_KEY_ID={aws} in the user's sync script.")
    p.record("aws_access_key", aws, aws, host, "observations")

    github = "ghp_" + b.token(36)
    host = b.episode(
        tenant_id="globex-dev",
        subject_id=p.subject("globex-dev"),
        namespace=code_ns,
        occurred_at=b.moment(),
        source_role="agent",
        session_id=b.new_id("s"),
        goal="CI cannot push release tags",
        actions=[f"export GITHUB_TOKEN={github}", "rerun release job"],
        outcome="unknown",
        text="Agent re-ran the release job with a personal token exported in the shell.",
    )
    p.record("github_token", github, github, host, "actions")

    bearer = "eyJhbGciOiJIUzI1NiJ9." + b.token(48) + "." + b.token(43)
    header = f"Authorization: Bearer {bearer}"
    host = p.host("initech", it_ns, _agent_success)
    host["feedback"] = f"Works now. I tested the API with curl -H '{header}'."
    p.record("bearer_token", header, bearer, host, "feedback")

    body = "\n".join(b.token(64, _B64) for _ in range(4))
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"
    host = b.episode(
        tenant_id="globex-dev",
        subject_id=p.subject("globex-dev"),
        namespace=code_ns,
        occurred_at=b.moment(),
        source_role="user",
        session_id=b.new_id("s"),
        text=f"Deploy fails with 'permission denied (publickey)'. The key it uses:\n{pem}",
    )
    p.record("private_key", pem, body.split("\n")[0], host, "text")

    host = p.host("globex-dev", code_ns, _agent_open)
    host["conditions"]["database_url"] = PG_URL
    p.record("password_in_url", PG_URL, "S3cretPass!", host, "conditions")

    host = b.episode(
        tenant_id="acme-it",
        subject_id=p.subject("acme-it"),
        namespace=it_ns,
        occurred_at=b.moment(),
        source_role="user",
        session_id=b.new_id("s"),
        text=f"Please charge the replacement charger to my corporate card {TEST_CARD}.",
    )
    p.record("card_number", TEST_CARD, TEST_CARD, host, "text")
    card = luhn_card(b)
    host = p.host("initech", it_ns, _is_agent)
    host["observations"].append(f"Purchase form autofilled card number {card}.")
    p.record("card_number", card, card, host, "observations")


_SENSITIVE = (
    ("agent", "hr-case", "employment-contract", 0,
     "Employee reported harassment by a team lead; HR case {case} opened and the shared "
     "folder was restricted to HR."),
    ("user", "medical-accommodation", "explicit-consent", 90,
     "I have a repetitive strain injury; my doctor recommends a vertical mouse and voice "
     "dictation software."),
    ("agent", "hr-case", "legitimate-interest", 30,
     "Manager asked IT to preserve the mailbox of an employee under disciplinary "
     "investigation ({case})."),
    ("user", "medical-accommodation", "explicit-consent", 30,
     "I'm on medical leave from next week for surgery; please set my out-of-office and pause "
     "my ticket assignments."),
    ("agent", "hr-case", "employment-contract", 0,
     "Salary correction for {subject} approved by HR under case {case}; payroll notified."),
)  # fmt: skip


def generate_sensitive(b: Builder, truth: Truth, tenant: TenantPlan) -> None:
    """2-4 high-sensitivity HR or medical records with a purpose; some expire."""
    rng = b.rng
    for role, purpose, basis, ttl_days, template in rng.sample(_SENSITIVE, rng.randint(2, 4)):
        subject = rng.choice(tenant.subjects)
        when = b.moment()
        episode = b.episode(
            tenant_id=tenant.tenant_id,
            subject_id=subject,
            namespace=tenant.subject_namespace[subject],
            occurred_at=when,
            source_role=role,
            session_id=b.new_id("s"),
            text=template.format(case=f"HR-{rng.randint(100, 999)}", subject=subject),
            sensitivity="high",
            consent_basis=basis,
            purpose=purpose,
            expires_at=when + timedelta(days=ttl_days) if ttl_days else None,
        )
        truth.sensitive_episode_ids.append(episode["episode_id"])


_TEMPORARY = {
    it_support.NAMESPACE: (
        ("Temporary local admin rights granted to {subject} for 48 hours to install a driver.", 2),
        ("Guest Wi-Fi voucher issued for {subject}'s visitor, valid for 7 days.", 7),
        ("Loaner laptop LN-{n} assigned to {subject} until their repair is back (14 days).", 14),
    ),
    coding.NAMESPACE: (
        ("Preview environment pr-{n} created for {subject}; it is torn down after 72 hours.", 3),
        ("Temporary read access to production logs granted to {subject} for the incident.", 1),
        ("Feature flag override for {subject} active for 10 days during the beta.", 10),
    ),
}


def generate_temporary(b: Builder, truth: Truth, tenant: TenantPlan, scale: int) -> None:
    """Short-lived facts with ``expires_at``: 4-6 per tenant (times scale)."""
    rng = b.rng
    for _ in range(rng.randint(4, 6) * scale):
        subject = rng.choice(tenant.subjects)
        namespace = tenant.subject_namespace[subject]
        template, days = rng.choice(_TEMPORARY[namespace])
        when = b.moment()
        b.episode(
            tenant_id=tenant.tenant_id,
            subject_id=subject,
            namespace=namespace,
            occurred_at=when,
            source_role=rng.choice(("agent", "system")),
            session_id=b.new_id("s"),
            text=template.format(subject=subject, n=rng.randint(100, 999)),
            sensitivity="medium",
            expires_at=when + timedelta(days=days),
        )


def generate_chatter(b: Builder, tenant: TenantPlan, scale: int) -> None:
    """Everyday episodes with no actions and no claims (about 90 per tenant and scale)."""
    rng = b.rng
    for _ in range(rng.randint(80, 100) * scale):
        subject = rng.choice(tenant.subjects)
        namespace = tenant.subject_namespace[subject]
        role = rng.choices(("system", "user", "agent"), weights=(3, 4, 3))[0]
        text = rng.choice(_CHATTER[namespace][role]).format(subject=subject, n=rng.randint(2, 99))
        b.episode(
            tenant_id=tenant.tenant_id,
            subject_id="system" if role == "system" else subject,
            namespace=namespace,
            occurred_at=b.moment(),
            source_role=role,
            session_id=None if role == "system" else b.new_id("s"),
            goal=text if role == "user" else None,
            text=text,
        )
