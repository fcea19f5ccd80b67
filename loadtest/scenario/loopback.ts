/**
 * The network rule of every load test: traffic goes to loopback only (127.0.0.0/8). This module
 * decides whether a URL or bind address obeys it; it never resolves names, so `localhost` and every
 * other host name are refused rather than trusted.
 */

const IPV4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

/** True for a dotted IPv4 literal inside 127.0.0.0/8. */
export function isLoopbackAddress(address: string): boolean {
  const m = IPV4.exec(address);
  if (m === null) return false;
  const octets = m.slice(1).map(Number);
  return octets.every((o) => o <= 255) && octets[0] === 127;
}

/**
 * Checks that `url` is an `http://` URL whose host is a 127.0.0.0/8 literal. Returns undefined when it
 * is, else a message saying why not (for a scenario error).
 */
export function loopbackUrlProblem(url: string): string | undefined {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return `${JSON.stringify(url)} is not a URL; write e.g. http://127.0.0.1:8080`;
  }
  if (parsed.protocol !== 'http:') return `only http:// targets are supported (got ${parsed.protocol})`;
  if (!isLoopbackAddress(parsed.hostname)) {
    return `${parsed.hostname} is not a loopback address: load tests may only send traffic to 127.0.0.0/8 (use e.g. 127.0.0.1)`;
  }
  if (parsed.port === '') return `${url} has no port; write e.g. http://127.0.0.1:8080`;
  return undefined;
}
