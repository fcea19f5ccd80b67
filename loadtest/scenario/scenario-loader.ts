/**
 * Reads a scenario file into a `Scenario`, or rejects it before any traffic with every problem as a
 * `file:line:col path: message` line: YAML syntax (Sluice's YAML reader), the scenario schema (ajv),
 * then the rules in `scenario-resolve.ts` and the embedded Sluice configs.
 */

import { readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { Ajv, type ValidateFunction } from 'ajv';
import { formatConfigPath, type ConfigIssue } from '../../config/config-issue.js';
import { mapSchemaErrors } from '../../config/schema-errors.js';
import { locatePath } from '../../config/yaml-locate.js';
import { parseYaml } from '../../config/yaml-parse.js';
import { LoadtestError, LoadtestErrorCode } from '../loadtest-error.js';
import { SCENARIO_SCHEMA } from './scenario-schema.js';
import { resolveRuns } from './scenario-resolve.js';
import type { Scenario } from './scenario-types.js';
import { checkSluiceConfig, type LocatedProblem } from './sluice-config-check.js';

let validator: ValidateFunction | undefined;

function validate(data: unknown): ConfigIssue[] {
  if (validator === undefined) {
    const ajv = new Ajv({ allErrors: true, verbose: true, strict: true, allowUnionTypes: true });
    ajv.addKeyword('patternErrorMessage');
    validator = ajv.compile(SCENARIO_SCHEMA);
  }
  return validator(data) ? [] : mapSchemaErrors(validator.errors ?? [], data);
}

/** `file:line:col path: message`, the compiler-style line every scenario problem is printed as. */
export function formatProblem(p: LocatedProblem): string {
  const where = `${p.file}:${p.line}:${p.col}`;
  return p.path === '' ? `${where} ${p.message}` : `${where} ${p.path}: ${p.message}`;
}

function reject(file: string, problems: LocatedProblem[]): never {
  const sorted = [...problems].sort((a, b) => a.line - b.line || a.col - b.col);
  const unique = [...new Set(sorted.map(formatProblem))];
  throw new LoadtestError(
    LoadtestErrorCode.scenarioInvalid,
    `${file} is not a valid scenario (${unique.length} ${unique.length === 1 ? 'problem' : 'problems'}); nothing was sent`,
    unique,
  );
}

/**
 * Parses and checks scenario `text`; `file` names it in errors and anchors relative paths. Resolves
 * to the scenario, or rejects with a `LoadtestError` (`SLUICE_LOADTEST_SCENARIO_INVALID`) whose
 * `details` are the problems in file order.
 */
export async function parseScenario(text: string, file: string): Promise<Scenario> {
  const parsed = parseYaml(text);
  if (parsed.errors.length > 0)
    reject(
      file,
      parsed.errors.map((e) => ({ file, ...e })),
    );
  const data = parsed.data;
  if (typeof data !== 'object' || data === null || Array.isArray(data)) {
    reject(file, [
      {
        file,
        line: 1,
        col: 1,
        path: '',
        message: 'a scenario is a mapping with at least name, load and workload',
      },
    ]);
  }
  const locate = (issue: ConfigIssue): LocatedProblem => ({
    file,
    ...locatePath(parsed.source, issue.path, issue.anchor),
    path: formatConfigPath(issue.path),
    message: issue.message,
  });
  const schemaIssues = validate(data);
  if (schemaIssues.length > 0) reject(file, schemaIssues.map(locate));
  const issues: ConfigIssue[] = [];
  const { runs, sluiceChecks } = resolveRuns(
    data as Record<string, unknown>,
    {
      file,
      dir: dirname(file),
      source: parsed.source,
      text,
    },
    issues,
  );
  const problems = issues.map(locate);
  for (const check of sluiceChecks) {
    problems.push(...(await checkSluiceConfig(check.spec, check.nodes, formatConfigPath(check.keyPath))));
  }
  if (problems.length > 0) reject(file, problems);
  const first = runs[0];
  return {
    name: first?.scenario ?? 'scenario',
    file,
    description: first?.description ?? '',
    runs,
  };
}

/** Reads `file` and parses it with {@link parseScenario}; an unreadable file is a scenario error too. */
export async function loadScenarioFile(file: string): Promise<Scenario> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new LoadtestError(
      LoadtestErrorCode.scenarioInvalid,
      `cannot read scenario ${file}: ${(err as Error).message}`,
    );
  }
  return parseScenario(text, file);
}
