/* tools/cli_params.c: search parameters on the command line (see cli.h).
 * Everything here comes from the library's table of settings
 * (simil/search_params.h): names, checks, messages and the --help text, so
 * that a setting added to the library reaches every command unchanged. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

int cli_params_init(cli_params *cp)
{
    memset(cp, 0, sizeof *cp);
    simil_status st = simil_search_params_create(&cp->params);
    return st == SIMIL_OK ? CLI_EXIT_OK : cli_fail(st, NULL);
}

void cli_params_free(cli_params *cp)
{
    simil_search_params_destroy(cp->params);
    cp->params = NULL;
}

int cli_params_set(cli_params *cp, const char *option, const char *name, const char *value)
{
    const simil_search_param_info *info = simil_search_param_find(name);
    simil_status st = simil_search_params_set(cp->params, name, value);
    if (st != SIMIL_OK) {
        cli_usage_error("%s: %s", option, simil_last_error());
        return 0;
    }
    for (int i = 0; i < cp->ngiven; i++)
        if (!strcmp(cp->given[i], info->name)) {
            cli_usage_error("%s: search parameter %s is given twice", option, name);
            return 0;
        }
    if (cp->ngiven == CLI_LIST_MAX) {
        cli_usage_error("%s: at most %d search parameters", option, CLI_LIST_MAX);
        return 0;
    }
    cp->given[cp->ngiven++] = info->name;
    return 1;
}

int cli_params_set_all(cli_params *cp, const char *option, const cli_list *items)
{
    for (int i = 0; i < items->count; i++) {
        char item[512];
        if (snprintf(item, sizeof item, "%s", items->values[i]) >= (int)sizeof item) {
            cli_usage_error("%s: '%.40s...' is too long", option, items->values[i]);
            return 0;
        }
        for (char *s = item, *next; s; s = next) {
            next = strchr(s, ',');
            if (next) *next++ = '\0';
            char *eq = strchr(s, '=');
            if (!eq || eq == s) {
                cli_usage_error("%s: '%s' is not NAME=VALUE", option, s);
                return 0;
            }
            *eq = '\0';
            if (!cli_params_set(cp, option, s, eq + 1)) return 0;
        }
    }
    return 1;
}

void cli_params_warn_unused(const cli_params *cp, const simil_index *index)
{
    for (int i = 0; i < cp->ngiven; i++)
        if (!simil_index_uses_search_param(index, cp->given[i]))
            cli_error("warning: %s does not use search parameter %s (it is for %s); it is "
                      "ignored",
                      simil_index_description(index), cp->given[i],
                      simil_search_param_find(cp->given[i])->index_types);
}

void cli_params_print_json(const cli_params *cp)
{
    if (cp->ngiven == 0) return;
    printf("\"params\": {");
    for (int i = 0; i < cp->ngiven; i++) {
        char value[64];
        const simil_search_param_info *info = simil_search_param_find(cp->given[i]);
        simil_search_params_get(cp->params, info->name, value, sizeof value);
        const char *quote = info->type == SIMIL_PARAM_ENUM ? "\"" : "";
        printf("%s\"%s\": %s%s%s", i ? ", " : "", info->name, quote, value, quote);
    }
    printf("}, ");
}

void cli_params_print_text(const cli_params *cp)
{
    for (int i = 0; i < cp->ngiven; i++) {
        char value[64];
        simil_search_params_get(cp->params, cp->given[i], value, sizeof value);
        printf("  %s: %s", cp->given[i], value);
    }
}

/* Append text to out[*len..size), wrapped at 79 columns with lines after the
 * first indented by indent spaces; *col is the current column. */
static void cli_wrap(char *out, size_t size, size_t *len, int *col, int indent, const char *text)
{
    for (const char *w = text; *w;) {
        size_t n = strcspn(w, " ");
        if (*col + 1 + (int)n > 79 && *col > indent) {
            *len += (size_t)snprintf(out + *len, *len < size ? size - *len : 0, "\n%*s", indent, "");
            *col = indent;
        } else if (*col > indent) {
            *len += (size_t)snprintf(out + *len, *len < size ? size - *len : 0, " ");
            (*col)++;
        }
        *len += (size_t)snprintf(out + *len, *len < size ? size - *len : 0, "%.*s", (int)n, w);
        *col += (int)n;
        w += n + strspn(w + n, " ");
    }
}

void cli_params_usage(const char *usage, char *out, size_t size)
{
    enum { INDENT = 22 };
    size_t len = (size_t)snprintf(out, size, "%s\nSearch parameters (NAME=VALUE):\n", usage);
    for (int i = 0; i < simil_search_param_count(); i++) {
        const simil_search_param_info *p = simil_search_param_get_info(i);
        char text[512];
        int col = INDENT;
        len += (size_t)snprintf(out + len, len < size ? size - len : 0, "  %-*s", INDENT - 2,
                                p->name);
        if ((int)strlen(p->name) > INDENT - 3) {
            len += (size_t)snprintf(out + len, len < size ? size - len : 0, "\n%*s", INDENT, "");
        }
        snprintf(text, sizeof text, "%s. %s%s; default %s; for %s.", p->help,
                 p->type == SIMIL_PARAM_ENUM ? "One of " : "", p->range, p->default_value,
                 p->index_types);
        cli_wrap(out, size, &len, &col, INDENT, text);
        len += (size_t)snprintf(out + len, len < size ? size - len : 0, "\n");
    }
}
