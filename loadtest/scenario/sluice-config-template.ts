/**
 * The placeholders of a scenario's embedded Sluice config: `{{nodes}}` (a flow list of `{url: ...}`),
 * `{{node_urls}}` (a flow list of URLs), `{{node_url.N}}`, `{{port}}` and `{{admin_port}}`. Finds bad
 * placeholders and fills them in; never parses the YAML around them.
 */

/** The values placeholders expand to. */
export interface TemplateValues {
  /** Base URLs of the fleet's nodes, in index order. */
  nodeUrls: readonly string[];
  /** A free port for the proxy listener. */
  port: number;
  /** A free port for the admin listener. */
  adminPort: number;
}

/** A bad placeholder, 1-based line and column inside the template. */
export interface TemplateProblem {
  line: number;
  col: number;
  message: string;
}

const PLACEHOLDER = /\{\{\s*([A-Za-z_]+)(?:\.(\d+))?\s*\}\}/g;
const NAMES = ['nodes', 'node_urls', 'node_url', 'port', 'admin_port'];

function positionOf(text: string, offset: number): { line: number; col: number } {
  const before = text.slice(0, offset);
  const line = before.split('\n').length;
  return { line, col: offset - before.lastIndexOf('\n') };
}

/**
 * The placeholders in `template` that cannot be filled: unknown names, `node_url` without or with an
 * out-of-range index, and node placeholders when the scenario starts no fleet (`nodes` = null).
 */
export function templateProblems(template: string, nodes: number | null): TemplateProblem[] {
  const problems: TemplateProblem[] = [];
  for (const m of template.matchAll(PLACEHOLDER)) {
    const [whole, name = '', index] = m;
    const at = positionOf(template, m.index);
    const fail = (message: string): void => void problems.push({ ...at, message });
    if (!NAMES.includes(name)) {
      fail(
        `unknown placeholder ${whole}; known: {{nodes}}, {{node_urls}}, {{node_url.N}}, {{port}}, {{admin_port}}`,
      );
    } else if (name.startsWith('node') && nodes === null) {
      fail(`${whole} needs a fleet: add a fleet section, or write the node URLs in the config`);
    } else if (name === 'node_url' && (index === undefined || Number(index) >= (nodes ?? 0))) {
      fail(`${whole} needs a node index from 0 to ${(nodes ?? 1) - 1}, like {{node_url.0}}`);
    } else if (name !== 'node_url' && index !== undefined) {
      fail(`${whole} takes no index`);
    }
  }
  return problems;
}

/** Fills every placeholder of `template` (call `templateProblems` first; unknown ones are left as they are). */
export function expandTemplate(template: string, values: TemplateValues): string {
  return template.replace(PLACEHOLDER, (whole, name: string, index: string | undefined) => {
    switch (name) {
      case 'nodes':
        return `[${values.nodeUrls.map((u) => `{url: "${u}"}`).join(', ')}]`;
      case 'node_urls':
        return `[${values.nodeUrls.map((u) => `"${u}"`).join(', ')}]`;
      case 'node_url':
        return values.nodeUrls[Number(index)] ?? whole;
      case 'port':
        return String(values.port);
      case 'admin_port':
        return String(values.adminPort);
      default:
        return whole;
    }
  });
}
