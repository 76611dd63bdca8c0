// Types of scripts/dashboard-fixture.mjs, for the tests written in TypeScript.
import type { ChildProcess } from 'node:child_process';
import type { BrowserContext, Page } from 'playwright-core';

export declare const root: string;
export declare const pqBin: string;
export declare const CHROMIUM: string;
export declare function chromiumMissing(): string | null;
export declare function launchBrowser(viewport?: {
  width: number;
  height: number;
}): Promise<{ context: BrowserContext; close(): Promise<void> }>;

export declare class Child {
  constructor(child: ChildProcess);
  readonly child: ChildProcess;
  readonly lines: string[];
  stderr: string;
  line(predicate: (line: string) => boolean): Promise<string>;
  send(line: string): void;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

export declare function runModule(work: string, name: string, source: string, args?: string[]): Child;

export interface Ui {
  readonly child: Child;
  readonly url: string;
  readonly base: string;
  readonly token: string;
}
export declare function startUi(dir: string, args?: string[]): Promise<Ui>;

export declare const WORKER: string;
export declare const PRODUCER: string;
export declare const GROUP_WORKER: string;
export declare const OUTLINED_PAGES: readonly string[];
export declare function pageOutline(page: Page): Promise<string>;
export declare function walkPages(page: Page, url: string, onPage?: (name: string) => Promise<void>): Promise<string>;

export interface Fixture {
  readonly work: string;
  readonly dir: string;
  readonly ui: Ui;
  readonly worker: Child;
  readonly producer: Child;
  stop(): Promise<void>;
}
export declare function startFixture(options?: { warmupMs?: number; handleMs?: number }): Promise<Fixture>;
