"""The ``search`` environment's world: fictional people, companies and cities.

Builds, from a seed, a small corpus whose documents link to each other (a person
founded a company or works at one, and was born in a city; a company is in a city
and makes one product; a city is in a region) and multi-hop questions whose answer
needs a *set* of gold documents. Each document is named by its entity's single word,
so the policy can copy a doc id from an observation.

This module knows the world and the questions; it knows nothing of retrieval, of the
agent's tools or of rewards.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Word tables read better packed than one word per line.
# fmt: off
PEOPLE = [
    "alba", "boris", "cleo", "dario", "elin", "fabio", "greta", "hugo", "ines", "jonas",
    "kira", "luca", "mara", "nils", "olga", "pavel", "rosa", "sven", "tara", "umar",
    "vera", "wilma", "xeno", "yara", "zeno", "ada", "bruno", "cyra", "dmitri", "edda",
    "felix", "gaia", "holm", "ivo", "juno", "karl", "lena", "milo", "nora", "otto",
]
COMPANIES = [
    "zentro", "quoril", "vexa", "lumio", "drakon", "orbix", "palto", "kestra", "nuvio",
    "fendra", "tavix", "morlo", "sibra", "gralin", "hexon", "calyx", "brevo", "zumra",
    "oktan", "pyrex", "solva", "trion", "wexa", "ulmo", "ravel",
]
CITIES = [
    "rivok", "sandor", "miral", "ostin", "belgar", "corvo", "teska", "lund", "verno",
    "halvik", "duran", "pesko",
]
PRODUCTS = [
    "lamps", "boats", "shoes", "bread", "clocks", "chairs", "maps", "bikes", "cups",
    "hats", "toys", "soap", "glass", "paper", "rope", "tiles", "drums", "kites",
    "bells", "nets", "pots", "coats", "gloves", "locks", "fans",
]
REGIONS = ["north", "south", "east", "west"]
FEATURES = ["river", "port", "bridge", "tower", "market", "castle"]
HOBBIES = ["chess", "music", "tennis", "poems", "cooking", "hiking"]
# fmt: on

# Question templates: {p} person, {c} company, {x} product. The gold set is given by
# the kind: which docs must be read to answer.
QUESTIONS = {
    "founder_city": "in which city is the company founded by {p} ?",
    "founder_region": "in which region is the city of the company founded by {p} ?",
    "product_founder": "who founded the company that makes {x} ?",
    "product_birthplace": "where was the founder of the company that makes {x} born ?",
}
QUESTION_KINDS = tuple(QUESTIONS)
# Words that carry no signal for BM25 (their idf would be near zero anyway).
STOPWORDS = frozenset(
    [
        ".",
        "?",
        "is",
        "a",
        "an",
        "the",
        "in",
        "of",
        "by",
        "at",
        "was",
        "which",
        "who",
        "where",
        "that",
    ]
)


@dataclass(frozen=True)
class Doc:
    name: str  # the doc id: the entity's word
    kind: str  # "person" | "company" | "city"
    text: str


@dataclass(frozen=True)
class World:
    docs: tuple[Doc, ...]
    founder_of: dict[str, str]  # company -> person
    company_of: dict[str, str]  # founder -> company
    city_of: dict[str, str]  # company -> city
    born_in: dict[str, str]  # person -> city
    product_of: dict[str, str]  # company -> product

    def question(self, kind: str, rng: random.Random) -> tuple[str, list[str]]:
        """A question of ``kind`` and its gold doc ids (in the order of the hops)."""
        company = rng.choice(sorted(self.founder_of))
        founder = self.founder_of[company]
        product = self.product_of[company]
        city = self.city_of[company]
        text = QUESTIONS[kind].format(p=founder, c=company, x=product)
        gold = {
            "founder_city": [founder, company],
            "founder_region": [founder, company, city],
            "product_founder": [company, founder],
            "product_birthplace": [company, founder, self.born_in[founder]],
        }[kind]
        return text, gold


def build_world(
    seed: int, num_people: int, num_companies: int, num_cities: int
) -> World:
    """A deterministic world: the same arguments always give the same corpus."""
    rng = random.Random(f"search-corpus:{seed}")
    people = rng.sample(PEOPLE, num_people)
    companies = rng.sample(COMPANIES, num_companies)
    cities = rng.sample(CITIES, num_cities)
    products = rng.sample(PRODUCTS, num_companies)  # unique: a product names a company
    founders = people[:num_companies]
    founder_of = dict(zip(companies, founders, strict=True))
    city_of = {c: rng.choice(cities) for c in companies}
    born_in = {p: rng.choice(cities) for p in people}
    product_of = dict(zip(companies, products, strict=True))
    company_of = {p: c for c, p in founder_of.items()}
    docs: list[Doc] = []
    for person in people:
        parts = [f"{person} is a person ."]
        # A founder mentions only the company it founded, so "founded <company>"
        # ranks the founder above the employees (BM25 is a bag of words).
        if person in company_of:
            parts.append(f"{person} founded {company_of[person]} .")
        else:
            parts.append(f"{person} works at {rng.choice(companies)} .")
        parts.append(f"{person} was born in {born_in[person]} .")
        parts.append(f"{person} likes {rng.choice(HOBBIES)} .")
        docs.append(Doc(person, "person", " ".join(parts)))
    for company in companies:
        text = (
            f"{company} is a company . {company} is in {city_of[company]} . "
            f"{company} makes {product_of[company]} ."
        )
        docs.append(Doc(company, "company", text))
    for city in cities:
        text = (
            f"{city} is a city . {city} is in the {rng.choice(REGIONS)} . "
            f"{city} has a {rng.choice(FEATURES)} ."
        )
        docs.append(Doc(city, "city", text))
    return World(tuple(docs), founder_of, company_of, city_of, born_in, product_of)


def index_words(text: str) -> list[str]:
    """The words BM25 indexes and queries with: everything but the stopwords."""
    return [w for w in text.split() if w not in STOPWORDS]
