/**
 * The prompt-prefix text an affinity key hashes, built as a string: the reference the tests compare
 * the key (hashed without building it, `affinity-key.ts`) and the prefix index with. Test support only.
 */
import { walkPromptText, type PromptSink } from '../../proxy/balance/prompt-text.js';

/**
 * The first `chars` characters of the request's prompt text (`prompt-text.ts`), or '' when it has
 * none. Stops reading as soon as it has enough, so a long conversation costs no more than its first
 * messages.
 */
export function promptPrefix(body: unknown, chars: number): string {
  const acc = new PrefixBuilder(chars);
  walkPromptText(body, acc);
  return acc.text();
}

/** Collects text up to a character limit. */
class PrefixBuilder implements PromptSink {
  private readonly parts: string[] = [];
  /** Characters collected so far. */
  private length = 0;
  constructor(private readonly limit: number) {}

  full(): boolean {
    return this.length >= this.limit;
  }

  add(s: string): void {
    if (this.length >= this.limit || s === '') return;
    const room = this.limit - this.length;
    const piece = s.length > room ? s.slice(0, room) : s;
    this.parts.push(piece);
    this.length += piece.length;
  }

  lastMessage(): void {}

  text(): string {
    return this.parts.join('');
  }
}
