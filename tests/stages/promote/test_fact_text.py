"""A fact's text: the object alone when it is a statement naming its subject, else the key."""

from hypothesis import given
from hypothesis import strategies as st

from memory_core.stages.promote.rows import fact_text


def test_statement_naming_its_subject_is_served_once():
    assert fact_text("Joanna", "observation:allergy", "Joanna is allergic to cats.") == (
        "Joanna is allergic to cats."
    )
    assert fact_text("Caroline", "p", "Caroline's friends are her rocks") == (
        "Caroline's friends are her rocks"
    )


def test_values_and_statements_about_others_keep_subject_and_predicate():
    assert fact_text("team-a", "owner", "Mina") == "team-a: owner = Mina"
    assert fact_text("Mina", "name", "Mina") == "Mina: name = Mina"  # a value, not a statement
    assert (
        fact_text("ann", "friend", "Joanna is her friend") == "ann: friend = Joanna is her friend"
    )
    # a longer word or id that contains the subject is not the subject
    assert fact_text("u1", "p", "u12 likes tea a lot") == "u1: p = u12 likes tea a lot"
    assert fact_text("team", "p", "team-a owns the repo") == "team: p = team-a owns the repo"


words = st.text(alphabet="abcdefghij ", min_size=0, max_size=30)


@given(who=st.text(alphabet="abcxyz-_1", min_size=1, max_size=8), predicate=words, obj=words)
def test_text_always_states_the_object_and_never_loses_the_subject(who, predicate, obj):
    text = fact_text(who, predicate, obj)
    assert obj in text
    assert text == obj or text == f"{who}: {predicate} = {obj}"
    if text == obj:  # the subject is still named
        assert who.lower() in obj.lower()
