/**
 * How a schema key is spelled outside the code. One function per spelling, so the flag parser, the env reader and
 * `--help` cannot disagree:
 *
 *   schema key   timeScale, maxNumSeqs, redisURL, p99Ms
 *   flag         --time-scale, --max-num-seqs, --redis-url, --p99-ms
 *   env          <PREFIX>TIME_SCALE, <PREFIX>MAX_NUM_SEQS, <PREFIX>REDIS_URL, <PREFIX>P99_MS
 *
 * The env prefix is used verbatim, so it carries its own trailing underscore (`KVROUTE_SIM_`).
 */

/** Splits a camelCase key into lower-case words; a run of capitals is one word (`redisURL` → redis, url). */
export function splitKeyWords(key: string): string[] {
  return key
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1 $2')
    .split(/[\s_-]+/)
    .filter((word) => word.length > 0)
    .map((word) => word.toLowerCase());
}

/** Flag name without the leading dashes: `timeScale` → `time-scale`. */
export function toFlagName(key: string): string {
  return splitKeyWords(key).join('-');
}

/** Env var name: `timeScale` with prefix `KVROUTE_SIM_` → `KVROUTE_SIM_TIME_SCALE`. */
export function toEnvName(key: string, envPrefix: string): string {
  return envPrefix + splitKeyWords(key).join('_').toUpperCase();
}
