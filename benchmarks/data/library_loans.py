"""A small lending library: books, members, loans and the catalog that ties them together.

Written for fastgguf's benchmarks (the code-edit prompt of benchmarks/bench_speculative.py); plain standard-library
Python, runnable on its own.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections import defaultdict
from typing import Dict, Iterable, Iterator, List, Optional

LOAN_DAYS = 21
MAX_LOANS = 5
DAILY_FINE_CENTS = 25


class LibraryError(Exception):
    """Base class of every error this module raises."""


class NotFound(LibraryError):
    """A book or member id that the catalog does not know."""


class LimitReached(LibraryError):
    """A member who already holds MAX_LOANS books, or owes too much, asked for another."""


@dataclasses.dataclass(frozen=True)
class Book:
    """One title on the shelves. copies counts the physical copies the library owns."""
    isbn: str
    title: str
    author: str
    year: int
    copies: int = 1
    tags: tuple = ()

    def matches(self, text: str) -> bool:
        """True if text occurs in the title, the author or one of the tags (case-insensitive)."""
        text = text.lower()
        return (text in self.title.lower() or text in self.author.lower()
                or any(text in tag.lower() for tag in self.tags))


@dataclasses.dataclass
class Member:
    """A library card holder."""
    member_id: int
    name: str
    email: str
    joined: dt.date
    fines_cents: int = 0

    def can_borrow(self, n_loans: int) -> bool:
        """Members may borrow while they hold fewer than MAX_LOANS books and owe less than ten euros."""
        return n_loans < MAX_LOANS and self.fines_cents < 1000


@dataclasses.dataclass
class Loan:
    """One copy of a book lent to a member."""
    isbn: str
    member_id: int
    start: dt.date
    due: dt.date
    returned: Optional[dt.date] = None

    @property
    def is_open(self) -> bool:
        return self.returned is None

    def days_late(self, today: dt.date) -> int:
        """Days past the due date (0 if not late), counted up to the return date or today."""
        end = self.returned or today
        return max(0, (end - self.due).days)


class Catalog:
    """Every book and member of the library, and every loan ever made.

    The catalog is the one place that knows how many copies of a book are on the shelves: a copy is available when
    the number of open loans of its isbn is below the number of copies."""

    def __init__(self) -> None:
        self.books: Dict[str, Book] = {}
        self.members: Dict[int, Member] = {}
        self.loans: List[Loan] = []
        self._next_member_id = 1

    # -- books ----------------------------------------------------------------------------------------------------
    def add_book(self, book: Book) -> Book:
        """Add a title, or more copies of a title the catalog already has."""
        old = self.books.get(book.isbn)
        if old is not None:
            book = dataclasses.replace(old, copies=old.copies + book.copies)
        self.books[book.isbn] = book
        return book

    def book(self, isbn: str) -> Book:
        try:
            return self.books[isbn]
        except KeyError:
            raise NotFound(f"no book with isbn {isbn}") from None

    def search(self, text: str) -> List[Book]:
        """Books whose title, author or tags contain text, oldest first."""
        return sorted((b for b in self.books.values() if b.matches(text)), key=lambda b: (b.year, b.title))

    def available(self, isbn: str) -> int:
        """Copies of isbn on the shelves now."""
        lent = sum(1 for loan in self.loans if loan.isbn == isbn and loan.is_open)
        return self.book(isbn).copies - lent

    # -- members --------------------------------------------------------------------------------------------------
    def add_member(self, name: str, email: str, joined: Optional[dt.date] = None) -> Member:
        member = Member(self._next_member_id, name, email, joined or dt.date.today())
        self.members[member.member_id] = member
        self._next_member_id += 1
        return member

    def member(self, member_id: int) -> Member:
        try:
            return self.members[member_id]
        except KeyError:
            raise NotFound(f"no member with id {member_id}") from None

    def open_loans(self, member_id: int) -> List[Loan]:
        return [loan for loan in self.loans if loan.member_id == member_id and loan.is_open]

    # -- loans ----------------------------------------------------------------------------------------------------
    def lend(self, isbn: str, member_id: int, today: Optional[dt.date] = None) -> Loan:
        """Lend one copy of isbn to a member for LOAN_DAYS days."""
        today = today or dt.date.today()
        member = self.member(member_id)
        if not member.can_borrow(len(self.open_loans(member_id))):
            raise LimitReached(f"{member.name} cannot borrow more books now")
        if self.available(isbn) <= 0:
            raise LibraryError(f"every copy of {self.book(isbn).title!r} is out")
        loan = Loan(isbn, member_id, today, today + dt.timedelta(days=LOAN_DAYS))
        self.loans.append(loan)
        return loan

    def give_back(self, isbn: str, member_id: int, today: Optional[dt.date] = None) -> int:
        """Close the member's oldest open loan of isbn; returns the fine it adds, in cents."""
        today = today or dt.date.today()
        for loan in self.open_loans(member_id):
            if loan.isbn == isbn:
                loan.returned = today
                fine = loan.days_late(today) * DAILY_FINE_CENTS
                self.member(member_id).fines_cents += fine
                return fine
        raise NotFound(f"member {member_id} holds no copy of {isbn}")

    def overdue(self, today: Optional[dt.date] = None) -> Iterator[Loan]:
        today = today or dt.date.today()
        return (loan for loan in self.loans if loan.is_open and loan.days_late(today) > 0)

    def renew(self, isbn: str, member_id: int, today: Optional[dt.date] = None) -> Loan:
        """Extend an open loan by LOAN_DAYS from today, unless it is overdue."""
        today = today or dt.date.today()
        for loan in self.open_loans(member_id):
            if loan.isbn == isbn:
                if loan.days_late(today):
                    raise LibraryError("an overdue loan cannot be renewed: return the book first")
                loan.due = today + dt.timedelta(days=LOAN_DAYS)
                return loan
        raise NotFound(f"member {member_id} holds no copy of {isbn}")


def popular_books(catalog: Catalog, top: int = 10) -> List[tuple]:
    """(count, title) of the most lent books in the catalog, most lent first."""
    counts: Dict[str, int] = defaultdict(int)
    for loan in catalog.loans:
        counts[loan.isbn] += 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return [(n, catalog.book(isbn).title) for isbn, n in ranked]


def member_report(catalog: Catalog, member_id: int, today: Optional[dt.date] = None) -> str:
    """A few lines about one member: open loans with their due dates, and the fines owed."""
    today = today or dt.date.today()
    member = catalog.member(member_id)
    lines = [f"{member.name} <{member.email}>, member since {member.joined.isoformat()}"]
    for loan in catalog.open_loans(member_id):
        late = loan.days_late(today)
        state = f"{late} days late" if late else f"due {loan.due.isoformat()}"
        lines.append(f"  {catalog.book(loan.isbn).title}: {state}")
    if member.fines_cents:
        lines.append(f"  fines: {member.fines_cents / 100:.2f} EUR")
    return "\n".join(lines)


def reminders(catalog: Catalog, today: Optional[dt.date] = None) -> Dict[str, List[str]]:
    """email -> titles overdue, for the reminder mails sent every morning."""
    out: Dict[str, List[str]] = defaultdict(list)
    for loan in catalog.overdue(today):
        out[catalog.member(loan.member_id).email].append(catalog.book(loan.isbn).title)
    return dict(out)


def load_books(catalog: Catalog, rows: Iterable[dict]) -> int:
    """Add books from dicts with the keys isbn, title, author, year and optionally copies and tags."""
    n = 0
    for row in rows:
        catalog.add_book(Book(row["isbn"], row["title"], row["author"], int(row["year"]),
                              int(row.get("copies", 1)), tuple(row.get("tags", ()))))
        n += 1
    return n


def to_json(catalog: Catalog) -> str:
    """The whole catalog as JSON: books, members and loans (dates as ISO strings)."""
    def enc(obj):
        if isinstance(obj, (dt.date, dt.datetime)):
            return obj.isoformat()
        raise TypeError(f"cannot encode {type(obj).__name__}")

    return json.dumps({"books": [dataclasses.asdict(b) for b in catalog.books.values()],
                       "members": [dataclasses.asdict(m) for m in catalog.members.values()],
                       "loans": [dataclasses.asdict(loan) for loan in catalog.loans]}, default=enc, indent=1)


def from_json(text: str) -> Catalog:
    """The inverse of to_json."""
    data = json.loads(text)
    catalog = Catalog()
    for b in data["books"]:
        catalog.add_book(Book(b["isbn"], b["title"], b["author"], b["year"], b["copies"], tuple(b["tags"])))
    for m in data["members"]:
        member = Member(m["member_id"], m["name"], m["email"], dt.date.fromisoformat(m["joined"]), m["fines_cents"])
        catalog.members[member.member_id] = member
        catalog._next_member_id = max(catalog._next_member_id, member.member_id + 1)
    for loan in data["loans"]:
        returned = loan["returned"] and dt.date.fromisoformat(loan["returned"])
        catalog.loans.append(Loan(loan["isbn"], loan["member_id"], dt.date.fromisoformat(loan["start"]),
                                  dt.date.fromisoformat(loan["due"]), returned or None))
    return catalog


class Statistics:
    """Monthly figures of a catalog, computed on demand."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def loans_per_month(self) -> Dict[str, int]:
        """'YYYY-MM' -> loans started that month."""
        out: Dict[str, int] = defaultdict(int)
        for loan in self.catalog.loans:
            out[loan.start.strftime("%Y-%m")] += 1
        return dict(sorted(out.items()))

    def average_loan_days(self) -> float:
        """Mean length of the loans that were returned, in days (0.0 when none was)."""
        days = [(loan.returned - loan.start).days for loan in self.catalog.loans if loan.returned]
        return sum(days) / len(days) if days else 0.0

    def share_returned_late(self) -> float:
        """Fraction of returned loans that came back after their due date."""
        done = [loan for loan in self.catalog.loans if loan.returned]
        if not done:
            return 0.0
        return sum(1 for loan in done if loan.returned > loan.due) / len(done)

    def busiest_members(self, top: int = 5) -> List[tuple]:
        """(loans, name) of the members who borrowed most."""
        counts: Dict[int, int] = defaultdict(int)
        for loan in self.catalog.loans:
            counts[loan.member_id] += 1
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        return [(n, self.catalog.member(mid).name) for mid, n in ranked]


def demo() -> None:
    """Build a tiny catalog, lend and return a few books, and print what the reports say."""
    catalog = Catalog()
    load_books(catalog, [
        {"isbn": "978-0", "title": "The River Town", "author": "A. Marsh", "year": 1998, "copies": 2,
         "tags": ["history"]},
        {"isbn": "978-1", "title": "Salt and Grain", "author": "B. Field", "year": 2004, "tags": ["trade"]},
        {"isbn": "978-2", "title": "Bridges of the Capital", "author": "C. Stone", "year": 2015, "copies": 3},
    ])
    ann = catalog.add_member("Ann", "ann@example.org", dt.date(2020, 5, 1))
    bob = catalog.add_member("Bob", "bob@example.org", dt.date(2021, 9, 12))
    start = dt.date(2024, 3, 1)
    catalog.lend("978-0", ann.member_id, start)
    catalog.lend("978-1", ann.member_id, start)
    catalog.lend("978-0", bob.member_id, start + dt.timedelta(days=2))
    catalog.give_back("978-1", ann.member_id, start + dt.timedelta(days=30))
    catalog.renew("978-0", bob.member_id, start + dt.timedelta(days=10))
    today = start + dt.timedelta(days=40)
    print(member_report(catalog, ann.member_id, today))
    print(member_report(catalog, bob.member_id, today))
    print("popular:", popular_books(catalog))
    print("reminders:", reminders(catalog, today))
    stats = Statistics(catalog)
    print("per month:", stats.loans_per_month(), "average days:", stats.average_loan_days())
    again = from_json(to_json(catalog))
    assert [b.title for b in again.search("")] == [b.title for b in catalog.search("")]


if __name__ == "__main__":
    demo()
