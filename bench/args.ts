// The benches' command lines: `--name value` pairs, read where they are used.

/** The value after `name` (spelled with its dashes) on the command line, or `fallback`. */
export function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(name);
  return i >= 0 ? (process.argv[i + 1] ?? fallback) : fallback;
}
