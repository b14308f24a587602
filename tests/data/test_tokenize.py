"""Tokeniser: expected token lists written out by hand from the rules in the module docstring."""

import pytest

from attnkit.data import detokenize, tokenize


@pytest.mark.parametrize(
    ("text", "lang", "expected"),
    [
        ("I love you.", "en", ["i", "love", "you", "."]),
        ("Je t'aime.", "fr", ["je", "t'", "aime", "."]),
        # Tatoeba French: U+202F / U+00A0 / U+2009 before ! ? : ; and the curly apostrophe.
        ("Je t\u2019aime\u202f!", "fr", ["je", "t'", "aime", "!"]),
        ("Vraiment\u00a0?", "fr", ["vraiment", "?"]),
        ("Attention\u2009: chien\u202f;", "fr", ["attention", ":", "chien", ";"]),
        ("L'homme qu'il a vu.", "fr", ["l'", "homme", "qu'", "il", "a", "vu", "."]),
        ("J'ai vu aujourd'hui.", "fr", ["j'", "ai", "vu", "aujourd'", "hui", "."]),
        ("Qu'est-ce que c'est ?", "fr", ["qu'", "est-ce", "que", "c'", "est", "?"]),
        ("I don't know.", "en", ["i", "do", "n't", "know", "."]),
        ("I can't, I'm Tom's.", "en", ["i", "ca", "n't", ",", "i", "'m", "tom", "'s", "."]),
        (
            "We'll, they've, you're, he'd",
            "en",
            ["we", "'ll", ",", "they", "'ve", ",", "you", "'re", ",", "he", "'d"],
        ),
        ("O'Reilly's members' dog", "en", ["o'reilly", "'s", "members", "'", "dog"]),
        (
            "Mr. Smith paid $6.42 at 10:30.",
            "en",
            ["mr.", "smith", "paid", "$", "6.42", "at", "10:30", "."],
        ),
        ("M. Caccia (Davenport):", "fr", ["m.", "caccia", "(", "davenport", ")", ":"]),
        ("Wait... what?!", "en", ["wait", "...", "what", "?", "!"]),
        ("Ça coûte 98,355 « euros ».", "fr", ["ça", "coûte", "98,355", "«", "euros", "»", "."]),
        ("etc.", "en", ["etc", "."]),  # final stop stays a token
    ],
)
def test_tokenize(text, lang, expected):
    assert tokenize(text, lang) == expected


@pytest.mark.parametrize(
    ("tokens", "lang", "expected"),
    [
        (["je", "t'", "aime", "."], "fr", "Je t'aime."),
        (["i", "love", "you", "."], "en", "I love you."),
        (["va", "!"], "fr", "Va !"),
        (
            ["i", "do", "n't", "know", ",", "tom", "'s", "dog", "?"],
            "en",
            "I don't know, tom's dog?",
        ),
        (["il", "a", "dit", "«", "oui", "»", "."], "fr", "Il a dit « oui »."),
        (["he", "said", '"', "hi", '"', "(", "twice", ")", "."], "en", 'He said "hi" (twice).'),
        ([], "en", ""),
    ],
)
def test_detokenize(tokens, lang, expected):
    assert detokenize(tokens, lang) == expected


@pytest.mark.parametrize(
    ("text", "lang"),
    [("Je t'aime !", "fr"), ("I don't know, Tom's dog.", "en"), ("Qu'est-ce que c'est ?", "fr")],
)
def test_round_trip_up_to_case(text, lang):
    assert detokenize(tokenize(text, lang), lang).lower() == text.lower()


def test_bad_input():
    with pytest.raises(ValueError, match=r"lang must be one of .* got 'de'"):
        tokenize("Hallo", "de")
    with pytest.raises(TypeError, match="text must be a str, got list"):
        tokenize(["a"], "en")
    with pytest.raises(TypeError, match="got a str"):
        detokenize("je t'aime", "fr")
