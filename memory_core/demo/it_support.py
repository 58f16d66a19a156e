"""IT-support problems, noise conditions, preferences and small talk for the demo data set.

Every problem has 2-3 root causes with their own fix; the fixes share steps ("reconnect vpn")
so a miner cannot tell them apart by a single action, only by the whole ordered pattern.
"""

from __future__ import annotations

from memory_core.demo.scenario import Cause, Problem

__all__ = [
    "ACCOUNT_LOCKOUT",
    "CHATTER",
    "DISK_FULL",
    "NAMESPACE",
    "NOISE",
    "OUTLOOK_SYNC",
    "PREFERENCES",
    "PRINTER",
    "VPN_720",
]

NAMESPACE = "it-support"

# Environment facts recorded with every episode, drawn independently of the outcome.
NOISE: dict[str, tuple[str, ...]] = {
    "os": ("windows-11", "windows-10", "macos-14", "ubuntu-22.04"),
    "tool_version": ("helpdesk-agent-2.3.1", "helpdesk-agent-2.4.0", "helpdesk-agent-2.4.2"),
    "region": ("eu-west", "us-east", "ap-south"),
    "device": ("laptop", "desktop", "thin-client"),
    "network": ("office", "home", "hotel"),
}

VPN_720 = Problem(
    key="vpn_720",
    namespace=NAMESPACE,
    error_code="720",
    goals=(
        "VPN fails with error 720",
        "Cannot connect to the VPN: error 720",
        "VPN connection drops right away with code 720",
        "User gets 'error 720' when starting the remote-access VPN",
        "Corporate VPN won't connect (error 720 on connect)",
    ),
    causes=(
        Cause(
            "adapter_mismatch",
            ("reset network adapter", "reconnect vpn"),
            "Device Manager lists a mismatched WAN Miniport (IP) adapter.",
        ),
        Cause(
            "cert_expired",
            ("renew certificate", "reconnect vpn"),
            "The machine certificate used for IKEv2 expired last week.",
        ),
        Cause(
            "ras_service_stopped",
            ("restart remote access service", "reconnect vpn"),
            "The Remote Access Connection Manager service is stopped.",
        ),
    ),
    distractors=(
        ("reboot machine", "reconnect vpn"),
        ("reinstall vpn client", "reconnect vpn"),
        ("flush dns cache", "reconnect vpn"),
        ("switch to backup vpn gateway", "reconnect vpn"),
    ),
    escalation=("collect vpn client logs", "escalate to network team"),
    resolved_note="The VPN tunnel is up and the user reaches the intranet.",
    failure_note="The VPN still fails with error 720.",
)

PRINTER = Problem(
    key="printer_offline",
    namespace=NAMESPACE,
    error_code="0x0000011b",
    goals=(
        "Printer shows offline and jobs fail with 0x0000011b",
        "Cannot print to the floor printer (error 0x0000011b)",
        "Print jobs stuck, Windows reports 0x0000011b",
        "User's documents never come out of the printer: 0x0000011b",
    ),
    causes=(
        Cause(
            "spooler_queue_stuck",
            ("clear print queue", "restart print spooler", "print test page"),
            "The spooler queue holds 37 jobs in an error state.",
        ),
        Cause(
            "driver_outdated",
            ("reinstall printer driver", "print test page"),
            "The installed printer driver predates the September security update.",
        ),
    ),
    distractors=(
        ("power cycle printer", "print test page"),
        ("set printer as default", "print test page"),
        ("remove and re-add printer", "print test page"),
    ),
    escalation=("collect spooler logs", "open ticket with print vendor"),
    resolved_note="The test page printed.",
    failure_note="Jobs still fail with 0x0000011b.",
)

DISK_FULL = Problem(
    key="disk_full",
    namespace=NAMESPACE,
    error_code="ENOSPC",
    goals=(
        "Disk full: no space left on device",
        "Laptop says the system drive is out of space",
        "Applications crash with ENOSPC, disk at 100%",
        "Cannot save files, the disk is full",
    ),
    causes=(
        Cause(
            "temp_over_10gb",
            ("clear temp files", "empty recycle bin", "verify free space"),
            "The temp folder holds more than 10 GB of installer leftovers.",
        ),
        Cause(
            "log_growth_runaway",
            ("rotate application logs", "compress old logs", "verify free space"),
            "An application log grew by 40 GB in two days.",
        ),
    ),
    distractors=(
        ("run disk cleanup wizard", "verify free space"),
        ("move documents to network share", "verify free space"),
        ("uninstall unused applications", "verify free space"),
    ),
    escalation=("collect disk usage report", "escalate to desktop engineering"),
    resolved_note="More than 30% of the disk is free again.",
    failure_note="The disk is still full.",
)

OUTLOOK_SYNC = Problem(
    key="outlook_sync",
    namespace=NAMESPACE,
    error_code="0x8004010F",
    goals=(
        "Outlook not syncing, error 0x8004010F",
        "Mail stuck in the outbox and Outlook reports 0x8004010F",
        "Outlook send/receive fails with 0x8004010F",
        "User's inbox stopped updating (Outlook 0x8004010F)",
    ),
    causes=(
        Cause(
            "ost_corrupt",
            ("close outlook", "rebuild ost file", "restart outlook"),
            "scanpst reports errors in the offline store (.ost).",
        ),
        Cause(
            "profile_corrupt",
            ("create new outlook profile", "restart outlook"),
            "The Outlook profile points to a deleted offline address book.",
        ),
    ),
    distractors=(
        ("disable add-ins", "restart outlook"),
        ("repair office installation", "restart outlook"),
        ("toggle cached exchange mode", "restart outlook"),
    ),
    escalation=("collect outlook diagnostics", "escalate to messaging team"),
    resolved_note="Send/receive completes and new mail arrives.",
    failure_note="Outlook still reports 0x8004010F.",
)

ACCOUNT_LOCKOUT = Problem(
    key="account_lockout",
    namespace=NAMESPACE,
    error_code="AADSTS50053",
    goals=(
        "Password reset: account locked (AADSTS50053)",
        "User is locked out after a password change",
        "Sign-in blocked with AADSTS50053, needs password reset",
        "Cannot log in, account keeps locking (AADSTS50053)",
    ),
    causes=(
        Cause(
            "stale_credentials_on_device",
            ("clear cached credentials", "unlock account", "sign in again"),
            "A phone still syncs mail with the old password every few minutes.",
        ),
        Cause(
            "mfa_unregistered",
            ("unlock account", "re-register mfa", "sign in again"),
            "The account has no MFA method registered since the phone was replaced.",
        ),
    ),
    distractors=(
        ("reset password", "sign in again"),
        ("wait for lockout to expire", "sign in again"),
        ("reset password", "unlock account", "sign in again"),
    ),
    escalation=("collect sign-in logs", "escalate to identity team"),
    resolved_note="The user signed in and stayed signed in.",
    failure_note="The account locked again within minutes.",
)

PREFERENCES: dict[str, tuple[str, ...]] = {
    "timezone": ("Europe/Berlin", "America/New_York", "Europe/London", "Asia/Singapore"),
    "report_format": ("PDF", "Markdown", "CSV", "Excel"),
    "meeting_time": ("mornings", "early afternoons", "late afternoons"),
    "notification_channel": ("email", "Slack", "Microsoft Teams", "SMS"),
}

CHATTER: dict[str, tuple[str, ...]] = {
    "system": (
        "Patch rollout wave {n} finished: 97% of managed devices compliant.",
        "Nightly backup of file server fs-{n} completed in 41 minutes.",
        "Certificate authority issued {n} machine certificates today.",
        "Endpoint protection signatures updated to build {n}.",
    ),
    "user": (
        "How do I book a meeting room for Thursday?",
        "Where can I find the guest Wi-Fi instructions for visitors?",
        "Is there a maintenance window planned this weekend?",
        "Can someone tell me who approves new monitor requests?",
        "What is the phone number of the service desk?",
    ),
    "agent": (
        "Shared the onboarding checklist with {subject}.",
        "Sent {subject} the link to the self-service software portal.",
        "Explained to {subject} how to map the team drive.",
        "Answered {subject}'s question about the hardware refresh schedule.",
    ),
}
