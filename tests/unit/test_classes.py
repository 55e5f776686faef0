"""Class matching by name: indices, class maps and their text form, and the match a classifier's outputs get."""

import pytest

from probe_core.data.classes import (
    ClassMismatchError,
    class_index,
    format_class_map,
    match_classes,
    parse_class_map,
    split_class_map,
    with_class_map,
)
from probe_core.errors import DataError

WORDS = ("zero", "one", "two")


@pytest.mark.parametrize("given, expected", [("one", 1), ("ONE", 1), ("  two ", 2), (0, 0), ("2", 2)])
def test_a_class_is_found_by_name_in_any_case_or_by_index(given, expected):
    assert class_index(given, WORDS) == expected


def test_a_name_wins_over_an_index():
    # "1" names class 2 here; as an index it would be class 1
    assert class_index("1", ("0", "2", "1")) == 2


@pytest.mark.parametrize("given", ["three", "3", "-1", ""])
def test_an_unknown_class_names_the_valid_ones(given):
    with pytest.raises(DataError, match=r"unknown class .* for digits; valid: 0\.\.2 or zero, one, two"):
        class_index(given, WORDS, "for digits")


def test_a_class_map_reads_from_text_or_a_dict_and_writes_back():
    assert parse_class_map(" zero = 0 ,one=1") == {"zero": "0", "one": "1"}
    assert parse_class_map({"zero": 0}) == {"zero": "0"}
    assert parse_class_map(None) is None and parse_class_map("") is None and parse_class_map({}) is None
    assert format_class_map({"zero": "0", "one": "1"}) == "zero=0,one=1"
    assert parse_class_map(format_class_map({"a": "b", "c": "d"})) == {"a": "b", "c": "d"}


@pytest.mark.parametrize("text, message", [("zero", "is not MODEL_CLASS=DATA_CLASS"), ("=0", "is not"),
                                           ("zero=", "is not"), ("zero=0,zero=1", "twice")])
def test_a_bad_class_map_entry_is_refused(text, message):
    with pytest.raises(DataError, match=message):
        parse_class_map(text)


def test_a_reference_carries_its_class_map_and_gives_it_back():
    carried = with_class_map("plugin:/models/net.py", "zero=0,one=1")
    assert carried == "plugin:/models/net.py#class_map=zero=0,one=1"
    assert split_class_map(carried) == ("plugin:/models/net.py", {"zero": "0", "one": "1"})
    assert split_class_map("plugin:/models/net.py") == ("plugin:/models/net.py", None)
    assert with_class_map(carried, {"two": "2"}) == "plugin:/models/net.py#class_map=two=2"  # replaced, not added
    assert with_class_map(carried, None) == "plugin:/models/net.py"


def test_names_match_in_any_case_and_spacing_never_by_position():
    match = match_classes(["Two", "zero", "ONE "], WORDS)
    assert match.data_index == (2, 0, 1) and not match.is_identity
    assert match.output_order == (1, 2, 0)  # the classifier's columns in the data set's label order
    assert match.aligned_names == WORDS and match.covered == (0, 1, 2)
    assert match.mapping == {"Two": "two", "zero": "zero", "ONE ": "one"}
    assert match_classes(WORDS, WORDS).is_identity


def test_a_classifier_of_some_of_the_classes_covers_those():
    match = match_classes(["two", "zero"], WORDS)
    assert match.covered == (0, 2) and match.aligned_names == ("zero", "two") and not match.is_identity


def test_a_class_map_matches_other_names_by_name_or_index():
    match = match_classes(["nil", "uno", "dos"], WORDS, {"nil": "zero", "UNO": "1", "dos": "Two"})
    assert match.data_index == (0, 1, 2) and match.is_identity
    assert match.given_map == {"nil": "zero", "UNO": "1", "dos": "Two"}


def test_unmatched_names_stop_with_both_lists_and_a_map_to_write():
    with pytest.raises(ClassMismatchError) as refused:
        match_classes(["zero", "uno"], WORDS, model="net.py", data="digits")
    message = str(refused.value)
    assert "net.py has [zero, uno], digits has [zero, one, two]" in message
    assert "no match for 'uno'" in message and "--class-map \"uno=zero,...\"" in message


def test_a_map_naming_a_class_the_model_lacks_is_refused():
    with pytest.raises(ClassMismatchError, match="class map names 'tres'"):
        match_classes(["zero", "one"], WORDS, {"tres": "two"})


def test_two_outputs_naming_one_class_are_refused():
    with pytest.raises(ClassMismatchError, match="name the data set's class\\(es\\) one more than once"):
        match_classes(["zero", "uno"], WORDS, {"uno": "one", "zero": "one"})
