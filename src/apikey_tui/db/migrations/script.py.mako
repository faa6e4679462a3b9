"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
${imports if imports else ""}
revision = ${repr(up_revision)}
down_revision: str | None = ${repr(down_revision)}
branch_labels: str | None = ${repr(branch_labels)}
depends_on: str | None = ${repr(depends_on)}


def upgrade() -> None:
    """Say what this version adds, and why."""
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    """Undo upgrade(), saying what is lost."""
    ${downgrades if downgrades else "pass"}
