"""A user deletion also looks for the identifying values only the subject gave (their device,
their reservation): a derived record that kept one turns the receipt unverified."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from forget_rows import add_procedure, prov
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from memory_core.context import RunContext
from memory_core.stages.forget import forget_subject, user_deletion
from memory_core.stages.forget.subject_values import identifying_values, only_theirs


def _call(tool: str, **args: object) -> dict[str, object]:
    return {"tool": tool, "args": args}


def _episodes(kit) -> list[dict]:
    """ana looks up her device DEV-ANA-7; ben his DEV-BEN-3; both quote ticket TCK-2024."""
    rows = []
    for i, (subject, device) in enumerate([("ana", "DEV-ANA-7"), ("ben", "DEV-BEN-3")] * 2):
        rows.append(
            kit.make_episode(
                f"{subject}{i}", minutes=i, subject_id=subject,
                actions=[_call("get_device", device_id=device, ticket="TCK-2024"),
                         _call("reset_adapter", mode="full")],
                conditions={"error_code": "720", "site": "Zürich-9" if subject == "ana" else "x"},
            )
        )  # fmt: skip
    return rows


def test_identifying_values_are_ids_in_arguments_and_conditions_not_words_numbers_or_dates() -> (
    None
):
    steps = [
        json.dumps(_call("book", id="1N99U6", cabin="economy", n=123456, when="2024-05-24 10:00")),
        json.dumps(_call("pay", payment={"id": "gift_card_5634230", "amount": 99})),
        json.dumps(_call("mail", to="ana.lee@example.org", cc="not-an-address@", at="a@b")),
        "reset the adapter on DEV-1",  # free text: words, not values
    ]
    found = identifying_values([steps, None], ['{"device": "DEV-ANA-7", "os": "linux"}', None, "{"])
    # a date with a time has a space; 123456 has no letter; economy no digit; an address
    # needs a domain with a dot, and six characters
    assert found == {"1N99U6", "gift_card_5634230", "DEV-ANA-7", "ana.lee@example.org"}


def test_only_values_no_other_episode_holds_are_checked(mem, kit) -> None:
    episodes = _episodes(kit)
    episodes.append(
        kit.make_episode("cy0", subject_id="cy", goal="VPN down on DEV-BEN-3 again", minutes=9)
    )
    mem.ingest(episodes)
    ana = {"DEV-ANA-7", "TCK-2024", "Zürich-9"}
    assert only_theirs(mem.stores, "subject_id = 'ana'", ana) == ["DEV-ANA-7", "Zürich-9"]
    # DEV-BEN-3 is in cy's free text: not ben's alone
    assert only_theirs(mem.stores, "subject_id = 'ben'", {"DEV-BEN-3", "TCK-2024"}) == []


def test_a_derived_record_keeping_a_value_only_the_subject_gave_is_residue(mem, kit) -> None:
    """A procedure approved from ben's runs that (as an older miner did) quotes ana's device:
    ana's deletion removes her episodes and their pins, and the receipt says it is not
    verified, naming the table but not the value. ben's own device in another procedure, and
    the ticket both gave, are nobody's residue."""
    mem.ingest(_episodes(kit))
    bens = prov(mem.stores, ["ben1", "ben3"])
    add_procedure(mem.stores, "p-ana", sources=bens, name="fix on DEV-ANA-7")
    add_procedure(mem.stores, "p-ben", sources=bens, name="fix on DEV-BEN-3 with TCK-2024")
    receipt = forget_subject(mem.stores, mem.settings, RunContext(now=kit.NOW), "ana")
    verification = receipt["verification"]
    assert verification["values_checked"] == 2  # DEV-ANA-7, Zürich-9
    assert not verification["verified"]
    assert verification["residue"] == {"lance.procedures.values": 1}
    assert "DEV-ANA-7" not in json.dumps(receipt) and "Z\\u00fcrich-9" not in json.dumps(receipt)


def test_a_candidate_body_keeping_such_a_value_is_residue_and_a_clean_home_verifies(
    tmp_path, kit
) -> None:
    """Mined from the same runs, no candidate quotes ana's device (it is one user's value),
    so her deletion verifies with her values checked; a candidate body edited to hold it (in
    a copy of the home) is found in DuckDB."""
    mem = kit.open_mem(tmp_path / "home")
    mem.ingest(_episodes(kit))
    mem.consolidate()
    with mem.stores.meta.connect() as con:
        (steps,) = con.execute(
            "SELECT body->>'$.procedure.steps' FROM candidates WHERE kind = 'procedural'"
        ).fetchone()
    assert "get_device(device_id=$device_id" in steps  # a variable: one user's value each
    receipt = forget_subject(mem.stores, mem.settings, RunContext(now=kit.NOW), "ana")
    assert receipt["verification"]["verified"], receipt["verification"]
    assert receipt["verification"]["values_checked"] == 2

    other = kit.open_mem(tmp_path / "other")
    other.ingest(_episodes(kit))
    other.consolidate()
    with other.stores.meta.transaction() as con:
        con.execute(
            "UPDATE candidates SET body = replace(body::VARCHAR, 'device_id=$device_id', "
            "'device_id=DEV-ANA-7')::JSON WHERE kind = 'procedural'"
        )
    receipt = forget_subject(other.stores, other.settings, RunContext(now=kit.NOW), "ana")
    assert not receipt["verification"]["verified"]
    assert receipt["verification"]["residue"] == {"duckdb.candidates.values": 1}


def test_batched_scan_reads_the_rows_a_whole_scan_reads(mem, kit) -> None:
    mem.ingest(_episodes(kit))
    where = "(subject_id = 'ana') IS NOT TRUE"
    whole = mem.stores.lance.scan("episodes", columns=["episode_id"], where=where)
    batches = list(
        mem.stores.lance.scan_batches("episodes", columns=["episode_id"], where=where, batch_rows=1)
    )
    assert len(batches) == whole.num_rows == 2
    assert sorted(i for b in batches for i in b.column(0).to_pylist()) == ["ben1", "ben3"]


# a small pool, so that subjects share values, hold them in free text, or alone
POOL = ["DEV-ANA-7", "R2X9Q7", "Zürich-9", "gift_card_42", "TCK-2024"]
spec_st = st.fixed_dictionaries({
    "subject": st.sampled_from(["ana", "ben", "cy"]),
    "arg": st.sampled_from(POOL),
    "condition": st.sampled_from([*POOL, "linux"]),
    "goal_mentions": st.sampled_from([None, *POOL]),
})  # fmt: skip


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking store-backed cases is slow
)
@given(specs=st.lists(spec_st, min_size=1, max_size=8), victim=st.sampled_from(["ana", "ben"]))
def test_only_theirs_is_what_no_other_episode_says_anywhere(kit, specs, victim) -> None:
    """Against the definition, row by row: a victim's identifying value is checked exactly
    when no other episode holds it in its goal, steps or conditions (stored JSON-escaped)."""
    episodes = [
        kit.make_episode(
            f"e{i}", minutes=i, subject_id=s["subject"],
            goal=f"VPN down on {s['goal_mentions']}" if s["goal_mentions"] else "VPN down",
            actions=[_call("get_device", device_id=s["arg"])],
            conditions={"error_code": "720", "site": s["condition"]},
        )
        for i, s in enumerate(specs)
    ]  # fmt: skip
    home = Path(tempfile.mkdtemp(prefix="values-prop-"))
    try:
        mem = kit.open_mem(home)
        mem.ingest(episodes)
        mine = [e for e in episodes if e["subject_id"] == victim]
        said = identifying_values(
            [[json.dumps(a, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
              for a in e["actions"]] for e in mine],
            [json.dumps(e["conditions"]) for e in mine],
        )  # fmt: skip
        others = [json.dumps(e, ensure_ascii=False) for e in episodes if e["subject_id"] != victim]
        expected = sorted(v for v in said if not any(v in o for o in others))
        assert only_theirs(mem.stores, f"subject_id = '{victim}'", said) == expected
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_long_value_in_any_file_under_the_home_is_found_by_the_byte_scan(mem, kit) -> None:
    """Outside the rows too: a copy of ana's gift card id (12+ bytes, matched anywhere like an
    id) in a file under the home keeps the deletion unverified; her short device id is left
    to the row checks (a few free bytes turn up by chance in binary pages)."""
    episodes = _episodes(kit)
    episodes[0]["actions"].append(_call("pay", payment_id="gift_card_5634230"))
    mem.ingest(episodes)
    (mem.settings.home / "export.txt").write_text("paid with gift_card_5634230 via DEV-ANA-7")
    receipt = forget_subject(mem.stores, mem.settings, RunContext(now=kit.NOW), "ana")
    verification = receipt["verification"]
    assert verification["values_checked"] == 3
    assert not verification["verified"]
    assert verification["residue"] == {"home_files": ["export.txt"]}


def test_a_rerun_after_the_rows_were_deleted_still_checks_what_the_first_run_found(
    mem, kit, monkeypatch
) -> None:
    """A deletion interrupted after its Lance deletes (here by an error in the version purge
    that follows them) leaves its request pending; its rerun reads none of ana's episodes any
    more, and still checks her values and texts, which the first run kept before deleting:
    the procedure quoting her device is residue. Once the receipt is stored, none is kept."""
    mem.ingest(_episodes(kit))
    bens = prov(mem.stores, ["ben1", "ben3"])
    add_procedure(mem.stores, "p-ana", sources=bens, name="fix on DEV-ANA-7")

    def power_cut(*args: object, **kwargs: object) -> None:
        raise RuntimeError("power cut")

    monkeypatch.setattr(user_deletion, "purge_versions", power_cut)
    with pytest.raises(RuntimeError, match="power cut"):
        forget_subject(mem.stores, mem.settings, RunContext(now=kit.NOW), "ana")
    monkeypatch.undo()
    assert mem.stores.lance.count("episodes", "subject_id = 'ana'") == 0
    with mem.stores.meta.connect() as con:
        kept = dict(con.execute(
            "SELECT kind, count(*) FROM deletion_needles GROUP BY kind").fetchall())  # fmt: skip
    assert kept["value"] == 2 and kept["text"] >= 1

    receipt = forget_subject(mem.stores, mem.settings, RunContext(now=kit.NOW), "ana")
    verification = receipt["verification"]
    assert verification["values_checked"] == 2 and verification["texts_checked"] >= 1
    assert not verification["verified"]
    assert verification["residue"] == {"lance.procedures.values": 1}
    with mem.stores.meta.connect() as con:
        assert con.execute("SELECT count(*) FROM deletion_needles").fetchone() == (0,)
        (status,) = con.execute("SELECT status FROM deletion_requests").fetchone()
    assert status == "unverified"
    assert "DEV-ANA-7" not in json.dumps(receipt)
