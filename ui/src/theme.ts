// Dark / light theme: "auto" follows the system (prefers-color-scheme);
// the choice is kept in localStorage and applied as <html data-theme>.

export type ThemeChoice = "auto" | "dark" | "light";
export const THEME_STORAGE = "hearth.theme";
const CHOICES: ThemeChoice[] = ["auto", "dark", "light"];

export function parseTheme(value: string | null | undefined): ThemeChoice {
  return CHOICES.includes(value as ThemeChoice) ? (value as ThemeChoice) : "auto";
}

/** The theme actually shown for a choice and the system's preference. */
export function resolveTheme(choice: ThemeChoice, systemDark: boolean): "dark" | "light" {
  return choice === "auto" ? (systemDark ? "dark" : "light") : choice;
}

/** The next choice of the toggle button: auto → dark → light → auto. */
export function nextTheme(choice: ThemeChoice): ThemeChoice {
  return CHOICES[(CHOICES.indexOf(choice) + 1) % CHOICES.length];
}

export function storedTheme(): ThemeChoice {
  try {
    return parseTheme(localStorage.getItem(THEME_STORAGE));
  } catch {
    return "auto";
  }
}

/** Keeps the user's choice. Only a choice the user made is written: a page
 *  that merely starts must not overwrite what another tab (or a test) chose. */
export function saveTheme(choice: ThemeChoice) {
  try {
    localStorage.setItem(THEME_STORAGE, choice);
  } catch {
    // storage disabled: the choice lasts for this page
  }
}

/** Shows a choice as <html data-theme>. */
export function applyTheme(choice: ThemeChoice) {
  const dark = window.matchMedia?.("(prefers-color-scheme: dark)").matches ?? true;
  document.documentElement.dataset.theme = resolveTheme(choice, dark);
}
