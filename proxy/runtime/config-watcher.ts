/**
 * Watches the directories of the files a reload reads (the config file, certificates) and calls
 * back, debounced, when one of them may have changed. Directories rather than files, because
 * editors save by writing a temporary file and renaming it over the original, which a watch on the
 * file itself would lose. A file that is a symlink has the directory of its target watched too, and
 * Kubernetes' atomic-writer names (`..data`, swapped to a new timestamped directory when a
 * ConfigMap or Secret changes) count as changes. Whether the content really changed is the
 * reload's business (it compares digests): this module only says "look again".
 */
import { realpathSync, watch, type FSWatcher } from 'node:fs';
import { basename, dirname } from 'node:path';

export class ConfigWatcher {
  private files: readonly string[];
  private readonly debounceMs: number;
  private readonly onChange: () => void;
  /** One watcher per directory, by path. */
  private readonly watchers = new Map<string, FSWatcher>();
  /** Names whose events matter: the files' and their targets' base names. */
  private names = new Set<string>();
  private timer: NodeJS.Timeout | null = null;
  private closed = false;

  /** Calls `onChange` `debounceMs` after the last event that concerns one of `files`. */
  constructor(files: readonly string[], debounceMs: number, onChange: () => void) {
    this.files = files;
    this.debounceMs = debounceMs;
    this.onChange = onChange;
    this.rewatch();
  }

  /**
   * Watches the directory of each file and of the file a symlink resolves to. Runs again after each
   * change, because a swap can point a symlink into a new directory.
   */
  private rewatch(): void {
    const dirs = new Set<string>();
    const names = new Set<string>();
    for (const f of this.files) {
      dirs.add(dirname(f));
      names.add(basename(f));
      try {
        const real = realpathSync(f);
        dirs.add(dirname(real));
        names.add(basename(real));
      } catch {
        // Missing for now (mid-swap, or deleted): the directory watch sees it come back.
      }
    }
    this.names = names;
    for (const [dir, w] of this.watchers) {
      if (dirs.has(dir)) continue;
      w.close();
      this.watchers.delete(dir);
    }
    for (const dir of dirs) {
      if (this.watchers.has(dir)) continue;
      try {
        const w = watch(dir, { persistent: false }, (_event, changed) => this.onEvent(changed));
        // A watched directory that disappears (an old ConfigMap revision) reports an error here.
        w.on('error', () => {
          w.close();
          if (this.watchers.get(dir) === w) this.watchers.delete(dir);
        });
        this.watchers.set(dir, w);
      } catch {
        // The directory vanished between realpath and watch; the next change rewatches.
      }
    }
  }

  private onEvent(changed: string | Buffer | null): void {
    if (this.closed) return;
    if (changed !== null) {
      const name = changed.toString();
      if (!this.names.has(name) && !name.startsWith('..')) return;
    }
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      if (this.closed) return;
      this.rewatch();
      this.onChange();
    }, this.debounceMs);
  }

  /** Watches `files` instead (a reload changed which certificate files are used). */
  setFiles(files: readonly string[]): void {
    if (this.closed) return;
    this.files = files;
    this.rewatch();
  }

  close(): void {
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    for (const w of this.watchers.values()) w.close();
    this.watchers.clear();
  }
}
