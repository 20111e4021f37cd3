/* memory.c - residency of a model's weights (prefetch, lock, resident bytes)
 * and of the process: the "device" section of cism.h. Session sizing and
 * trimming live in session.c, next to the buffers they count. */
#include "model.h"
#include "../core/error.h"
#include "../platform/platform.h"

static cism_status mem_status(int rc, const char *what, const char *err) {
    switch (rc) {
    case CISM__MEM_OK: return CISM_OK;
    case CISM__MEM_DENIED: return cism__fail(CISM_ERR_PERMISSION, "%s: %s", what, err);
    case CISM__MEM_UNSUPPORTED: return cism__fail(CISM_ERR_UNSUPPORTED, "%s: %s", what, err);
    default: return cism__fail(CISM_ERR_IO, "%s: %s", what, err);
    }
}

int32_t cism_model_is_mapped(const cism_model *model) { return model ? model->file.view.mapped == 1 : 0; }

cism_status cism_model_prefetch(const cism_model *model, int32_t wait) {
    char err[256] = "";
    cism__clear_error();
    if (!model) return cism__fail(CISM_ERR_INVALID_ARG, "cism_model_prefetch: model is NULL");
    return mem_status(cism__mem_prefetch(model->file.view.data, model->file.view.size, wait != 0, err, sizeof(err)),
                      "cism_model_prefetch", err);
}

static cism_status lock_or_unlock(const cism_model *model, int lock) {
    char err[256] = "";
    cism__clear_error();
    if (!model) return cism__fail(CISM_ERR_INVALID_ARG, "%s: model is NULL", lock ? "cism_model_lock" : "cism_model_unlock");
    return mem_status(cism__mem_lock(model->file.view.data, model->file.view.size, lock, err, sizeof(err)),
                      lock ? "cism_model_lock" : "cism_model_unlock", err);
}

cism_status cism_model_lock(const cism_model *model) { return lock_or_unlock(model, 1); }
cism_status cism_model_unlock(const cism_model *model) { return lock_or_unlock(model, 0); }

cism_status cism_model_resident_bytes(const cism_model *model, int64_t *resident, int64_t *total) {
    int64_t r;
    cism__clear_error();
    if (!model || !resident) return cism__fail(CISM_ERR_INVALID_ARG, "cism_model_resident_bytes: NULL argument");
    r = cism__mem_resident(model->file.view.data, model->file.view.size);
    if (r < 0) return cism__fail(CISM_ERR_UNSUPPORTED, "cism_model_resident_bytes: the OS does not report page residency here");
    *resident = r;
    if (total) *total = (int64_t)model->file.view.size;
    return CISM_OK;
}

cism_status cism_process_resident_bytes(int64_t *bytes) {
    int64_t r;
    cism__clear_error();
    if (!bytes) return cism__fail(CISM_ERR_INVALID_ARG, "cism_process_resident_bytes: bytes is NULL");
    r = cism__resident_bytes();
    if (r < 0) return cism__fail(CISM_ERR_UNSUPPORTED, "cism_process_resident_bytes: the OS does not report resident memory here");
    *bytes = r;
    return CISM_OK;
}
