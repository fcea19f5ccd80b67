/**
 * Watches the config file's directory (editors replace files by rename, which a watch on the file
 * itself would lose) and calls back, debounced, when the file may have changed.
 */
import { watch, type FSWatcher } from 'node:fs';
import { basename, dirname } from 'node:path';

export class ConfigWatcher {
  private readonly watcher: FSWatcher;
  private timer: NodeJS.Timeout | null = null;

  /** Calls `onChange` `debounceMs` after the last event that concerns `file`. */
  constructor(file: string, debounceMs: number, onChange: () => void) {
    const name = basename(file);
    this.watcher = watch(dirname(file), { persistent: false }, (_event, changed) => {
      if (changed !== null && changed !== name) return;
      if (this.timer !== null) clearTimeout(this.timer);
      this.timer = setTimeout(() => {
        this.timer = null;
        onChange();
      }, debounceMs);
    });
    this.watcher.on('error', () => undefined);
  }

  close(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.watcher.close();
  }
}
