/**
 * The few statement helpers every SQLite user among the agents modules wants: all rows, one row,
 * a write, and a transaction that rolls back when its function throws.
 *
 * @example
 * ```ts
 * import { DatabaseSync } from "node:sqlite";
 * import { sqlHelpers } from "./sqlite.ts";
 * const { all, run, tx } = sqlHelpers(new DatabaseSync(":memory:"));
 * tx(() => run("CREATE TABLE t (x INTEGER)"));
 * console.log(all("SELECT * FROM t"));
 * ```
 * @module
 */
import type { DatabaseSync, SQLInputValue } from "node:sqlite";

export type Row = Record<string, SQLInputValue>;

export function sqlHelpers(db: DatabaseSync) {
  return {
    all: (sql: string, ...p: SQLInputValue[]) => db.prepare(sql).all(...p) as Row[],
    get: (sql: string, ...p: SQLInputValue[]) => db.prepare(sql).get(...p) as Row | undefined,
    run: (sql: string, ...p: SQLInputValue[]) => db.prepare(sql).run(...p),
    /** Runs `f` in `BEGIN IMMEDIATE` ... `COMMIT`, rolling back when it throws. */
    tx<T>(f: () => T): T {
      db.exec("BEGIN IMMEDIATE");
      try {
        const r = f();
        db.exec("COMMIT");
        return r;
      } catch (e) {
        db.exec("ROLLBACK");
        throw e;
      }
    },
  };
}
