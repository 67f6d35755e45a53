// The command table drives dispatch, `--help` and the unknown-command error: each public command
// appears in all three and in the README, and the internal ones (children of Hearth) in none of
// the user-facing lists.
import assert from "node:assert/strict";
import {
  COMMANDS,
  commandUsage,
  findCommand,
  publicCommands,
  unknownCommand,
} from "../lib/cli/commands.ts";
import { helpText } from "../lib/cli/flags.ts";
import { mainTs, runCommand } from "./support/server.ts";

const internal = COMMANDS.filter((c) => "internal" in c).map((c) => c.name);

Deno.test("commands: --help lists every public command once and no internal one", () => {
  const help = helpText();
  for (const name of publicCommands()) {
    const uses = help.match(new RegExp(`^(Usage: | +)hearth ${name}\\b`, "gm")) ?? [];
    assert.equal(uses.length, 1, `hearth ${name} in --help: ${uses.length} times`);
  }
  for (const name of internal) assert.doesNotMatch(help, new RegExp(`hearth ${name}\\b`));
  assert.deepEqual(
    commandUsage().flatMap((l) => l.match(/^(?:Usage: | +)hearth (\S+)/)?.[1] ?? []),
    publicCommands(),
  );
});

Deno.test("commands: the unknown-command error names every public command", () => {
  const msg = unknownCommand("frobnicate");
  const listed = msg.match(/commands: ([^;]+);/)![1].split(", ");
  assert.deepEqual(listed, publicCommands());
  assert.equal(findCommand("frobnicate"), undefined);
  for (const c of COMMANDS) assert.equal(findCommand(c.name), c.name);
});

Deno.test("commands: the README names every public command as `hearth NAME`", async () => {
  const readme = await Deno.readTextFile(new URL("../README.md", import.meta.url));
  const missing = publicCommands().filter((n) => !new RegExp(`hearth ${n}\\b`).test(readme));
  assert.deepEqual(missing, [], `README lacks: ${missing.join(", ")}`);
});

Deno.test("commands: main.ts: an unknown command exits 2 with the table's list; --help prints it", async () => {
  // `serve --help` and the others print usage and exit 0; an unknown name exits 2 listing them.
  const bad = await runCommand([Deno.execPath(), "run", "-A", mainTs, "frobnicate"]);
  assert.equal(bad.code, 2);
  assert.equal(bad.stderr.trim(), `hearth: ${unknownCommand("frobnicate")}`);
  const help = await runCommand([Deno.execPath(), "run", "-A", mainTs, "--help"]);
  assert.equal(help.code, 0);
  for (const name of publicCommands()) assert.match(help.stdout, new RegExp(`hearth ${name}\\b`));
});
