# Atlas CLI configuration, for people who have the CLI. It describes what
# `pinctl migrate` does (pinctl is built on the atlas library because the CLI
# cannot be installed here; see migrate/): the same directory, the same
# revision table, the same lint policy.
#
#   atlas migrate status --env local --var url="$DATABASE_URL"
#   atlas migrate apply  --env local --var url="$DATABASE_URL"
#   atlas migrate lint   --env local --latest 1
#
# New files are written by `pinctl migrate diff NAME` from the ent schema
# (the open-source CLI cannot read ent://), never by hand.
#
# No docker: the dev database is any empty local PostgreSQL database, e.g.
# one started by `pinctl pg exec -- sh -c 'atlas migrate lint --env local
# --var dev_url="$DATABASE_URL"'`. Keep URLs database-wide (no search_path):
# revisions then live in atlas_schema_revisions.atlas_schema_revisions, where
# pinctl keeps them.

# The database to migrate: postgres://user@host:port/db?sslmode=disable.
variable "url" {
  type    = string
  default = getenv("DATABASE_URL")
}

# An empty scratch database on a local PostgreSQL: lint replays the
# migrations there.
variable "dev_url" {
  type    = string
  default = "postgres://postgres@127.0.0.1:5432/pin_dev?sslmode=disable"
}

locals {
  migration_dir = "file://migrate/migrations"
}

env "local" {
  url = var.url
  dev = var.dev_url

  migration {
    dir              = local.migration_dir
    revisions_schema = "atlas_schema_revisions"
  }

  # The policy of `pinctl migrate lint` (see migrate.Lint): these are errors;
  # condrop (dropped foreign key) stays a warning. pinctl also errs on a
  # CREATE INDEX without CONCURRENTLY on an existing table (concurrent_index,
  # an Atlas Pro analyzer).
  lint {
    latest = 1
    destructive {
      error = true
    }
    data_depend {
      error = true
    }
    incompatible {
      error = true
    }
  }
}
